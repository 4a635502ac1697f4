"""Another simulator drives the clock: run_until, submit, run, events."""

import json

from aisimulate_core import Prompt, SimRequest, build_simulation, load_payload
from test_semantics_cases import bare_spec, req


def test_run_until_then_submit_at_the_embedders_clock():
    events = []
    payload = load_payload(json.dumps(bare_spec([req(0, 16, 4)])))
    sim = build_simulation(payload, on_event=lambda kind, t, r: events.append((kind, t)))
    sim.run_until(12.0)
    assert sim.now_ms == 12.0
    assert events == [("arrival", 0.0)]
    late = SimRequest(0, Prompt.from_tokens(range(1000, 1016)), 2, 0.0, request_id="late")
    sim.submit(late)
    sim.run()
    assert sim.is_done()
    report = sim.report()
    rows = {r["request_id"] if "request_id" in r else r["uuid"]: r for r in report.per_request}
    assert report.summary["completed_requests"] == 2
    assert late.arrival_ms == 12.0
    # the running pass ends at 15; the late prefill joins the next pass, which also carries a
    # decode step, so it costs 10 + 5 ms
    assert rows["late"]["first_token_ms"] == 30.0
    assert [kind for kind, _ in events] == ["arrival", "arrival", "completed", "completed"]
