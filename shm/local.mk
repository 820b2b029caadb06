# shm/local.mk - the shared-memory rings, arenas and segment checks, headers
# only, that the daemon and libpagoda both compile in (they know nothing of
# the engine).  Their tests: tests/test_ring, under TSan too
# (tests/local.mk).
noinst_HEADERS += \
	shm/ring.h \
	shm/segment.h
EXTRA_DIST += shm/README.md
