from setuptools import setup

setup(cffi_modules=["csrc/ffi_build.py:ffibuilder"])
