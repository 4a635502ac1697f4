"""Backend versions against the real aiconfigurator-core 0.12.0 database."""

import pytest
from aic_helpers import PATH, QWEN

from aisimulate_aic_timing.config import parse_config
from aisimulate_aic_timing.versions import ResolvedVersion, resolve_backend_version
from aisimulate_core.errors import ConfigError

P = PATH
VLLM_SYSTEMS = "a100_sxm, b200_sxm, b300_sxm, b60, gb200, gb300, h100_sxm, h200_sxm, l40s, rtx_pro_6000_server"


def resolve(**fields):
    return resolve_backend_version(parse_config({**QWEN, **fields}, P), P)


def error(**fields):
    with pytest.raises(ConfigError) as info:
        resolve(**fields)
    return str(info.value)


@pytest.mark.parametrize(
    "backend, version",
    [("vllm", "0.24.0"), ("sglang", "0.5.14"), ("trtllm", "1.3.0rc20")],
)
def test_without_a_version_the_database_current_one_is_used(backend, version):
    assert resolve(backend=backend) == ResolvedVersion(version, "database current")


def test_current_depends_on_the_system():
    assert resolve(system="a100_sxm", backend="sglang") == ResolvedVersion("0.5.10", "database current")


@pytest.mark.parametrize(
    "requested, version",
    [("0.24.0", "0.24.0"), ("0.27.0", "0.27.0"), ("current", "0.24.0"), ("next", "0.27.0")],
)
def test_an_explicit_version_or_slot_with_data_is_used(requested, version):
    assert resolve(backend_version=requested) == ResolvedVersion(version, "explicit")


@pytest.mark.parametrize(
    "backend, original_default, listing",
    [
        ("vllm", "0.19.0", "0.24.0 (current), 0.27.0 (next)"),
        ("sglang", "0.5.10", "0.5.14 (current), 0.5.16 (next)"),
        ("trtllm", "1.3.0rc10", "1.3.0rc20 (current), 1.3.0rc23 (next)"),
    ],
)
def test_the_original_default_versions_have_no_data(backend, original_default, listing):
    assert error(backend=backend, backend_version=original_default) == (
        f"{P}.backend_version: aiconfigurator-core 0.12.0 has no {backend} performance data for "
        f"version \"{original_default}\" on h200_sxm; versions with data: {listing}")


def test_a_missing_slot_is_an_error_listing_the_versions():
    assert error(backend_version="previous") == (
        f"{P}.backend_version: aiconfigurator-core 0.12.0 has no vllm performance data for "
        f"version \"previous\" on h200_sxm; versions with data: 0.24.0 (current), 0.27.0 (next)")


@pytest.mark.parametrize("system", ["foo_sxm", "a100_pcie"])
def test_a_system_without_data_is_an_error_listing_the_systems_with_data(system):
    assert error(system=system) == (
        f"{P}.system: aiconfigurator-core 0.12.0 has no vllm performance data for system "
        f"\"{system}\"; systems with vllm data: {VLLM_SYSTEMS}")
