# kernels/local.mk - the registry of backends: the one place that knows
# which backends this build has (the CPU's always, the CUDA module and
# NCCL between GPUs when configured).  The engine opens a backend or a
# communicator group through it and names none.  What every backend
# implements is in kernels/backend.h, kernels/comm.h and kernels/dtype.h
# (listed with the CPU backend, kernels/cpu/local.mk).
noinst_LTLIBRARIES += kernels/libpgregistry.la
kernels_libpgregistry_la_SOURCES = \
	kernels/registry.c \
	kernels/registry.h
# Set outside any conditional: a per-target CPPFLAGS left empty would
# replace AM_CPPFLAGS (and -D_GNU_SOURCE with it).  PG_PKGLIBDIR is where
# make install puts the CUDA module (kernels/cuda/local.mk).
kernels_libpgregistry_la_CPPFLAGS = $(AM_CPPFLAGS) \
	-DPG_PKGLIBDIR='"$(pkglibdir)"'
kernels_libpgregistry_la_LIBADD = kernels/libpgkernels.la -ldl -lpthread
