#!/bin/sh
# test-engine-replicas.sh - the serving engine's tests (continuous
# batching, prefix cache, preemption, cancellation, n > 1, fairness, an
# injected device failure) run again with every forward pass under 2
# replicas of one one-thread CPU device (data parallel: the page cache cut
# into 2 zones, each batch split between the replicas).
PAGODA_TEST_PLAN=1x1x1r2 exec ./tests/test_engine
