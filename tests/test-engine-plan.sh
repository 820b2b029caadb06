#!/bin/sh
# test-engine-plan.sh - the serving engine's tests (continuous batching,
# prefix cache, preemption, cancellation, n > 1, fairness) run again with
# every forward pass under a pipeline-parallel 2 × tensor-parallel 2 plan
# of CPU devices, plus an injected device failure.
PAGODA_TEST_PLAN=2x2x1 exec ./tests/test_engine
