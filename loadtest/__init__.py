"""Load tests, benchmarks and the verification harness: loadtest/README.md lists each one."""
