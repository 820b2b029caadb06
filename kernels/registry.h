/*
 * registry.h - the backends and communicators this build has, opened by
 * what is asked for (a device kind and index, a group's kind) rather than
 * by their constructors, so that the engine names no backend: it asks for
 * "a CPU device with these threads" or "a CUDA device N", a host group or
 * a device group, and the registry says, in words, when this build or
 * this host has none.  The CPU backend is linked in; the CUDA backend and
 * NCCL are a module of their own (pagoda-cuda.so in $(pkglibdir), built
 * with ./configure --with-cuda), loaded the first time a GPU is asked
 * for, so that a CPU-only process maps no CUDA library.
 *
 * Nothing here runs a kernel; every call is made at set-up.
 */
#ifndef PAGODA_KERNELS_REGISTRY_H
#define PAGODA_KERNELS_REGISTRY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/comm.h"
#include "kernels/cpu/cpu.h"	/* enum pg_cpu_isa, the CPU's kernel levels */

/*
 * Where the CUDA module is looked for instead of the installed folder: a
 * build tree's kernels/.libs (make check sets it).
 */
#define PG_MODULE_DIR_ENV "PAGODA_MODULE_DIR"

/* The kinds of device a backend drives. */
enum pg_backend_kind {
	PG_BACKEND_CPU = 0,	/* host cores, the embedded default */
	PG_BACKEND_CUDA = 1,	/* an NVIDIA GPU (cuBLAS, NCCL between GPUs) */
};

/* What pg_backend_open is asked for. */
struct pg_backend_spec {
	enum pg_backend_kind kind;
	int index;		/* CUDA: the device's index */
	/* CPU only: */
	int n_threads;		/* <= 0: one per online CPU */
	enum pg_cpu_isa isa;	/* the highest kernel table to use */
	int llama_numerics;	/* llama.cpp's summation orders */
	const int *cpus;	/* pin the pool's threads to these, or NULL */
	int n_cpus;
};

/*
 * pg_backend_open - a backend for the device spec describes.  Returns 0
 * with *out (destroy with (*out)->ops->destroy), or a negative errno with
 * a message in err that says what to do: -ENOTSUP when this build has no
 * such backend (rebuild with ./configure --with-cuda), -ENODEV when the
 * host has no such device, -EINVAL for a bad PAGODA_CPU_KERNELS, else the
 * backend's error.
 */
int pg_backend_open(const struct pg_backend_spec *spec,
		    struct pg_backend **out, char *err, size_t err_len);

/* pg_backend_built - whether this process can open backends of kind k
 * (CUDA: the module loads). */
int pg_backend_built(enum pg_backend_kind k);

/* One GPU as the planner sees it. */
struct pg_gpu_info {
	char name[256];
	size_t total_bytes;	/* device memory */
	size_t free_bytes;	/* free now */
};

/*
 * pg_gpu_count - the GPUs this host shows this build: 0 when there is
 * none, no driver, or no CUDA in this build.
 * pg_gpu_info - GPU index's figures: 0, or -errno with a message in err.
 */
int pg_gpu_count(void);
int pg_gpu_info(int index, struct pg_gpu_info *out, char *err,
		size_t err_len);

/*
 * Host groups: ranks that are threads of this process (CPU devices),
 * over shared memory.  pg_host_group_create makes one of size ranks (0 or
 * -errno); each rank takes its handle with pg_host_group_join (NULL: out
 * of memory); set_spin sets how long a waiting rank spins before it
 * sleeps; destroy frees the group once every handle is destroyed.
 */
struct pg_host_group;
int pg_host_group_create(int size, struct pg_host_group **out);
struct pg_comm *pg_host_group_join(struct pg_host_group *g, int rank);
void pg_host_group_set_spin(struct pg_host_group *g, int64_t spin_ns);
void pg_host_group_destroy(struct pg_host_group *g);

/*
 * Device groups: GPUs' ranks (NCCL).  pg_device_groups_built says whether
 * this process has them (the CUDA module loads and was built with NCCL).  A group is named by an id of
 * PG_DEVICE_GROUP_ID_BYTES that one place makes (pg_device_group_id) and
 * every rank joins with (pg_device_group_join: rank `rank` of `size` on
 * the backend be, which must be a CUDA backend; it returns when all ranks
 * have joined, or gives up with -ECANCELED once *cancel is set, or with
 * -ETIMEDOUT at the CLOCK_MONOTONIC time deadline_ns).  Both return 0 or
 * -errno with a message in err.
 */
#define PG_DEVICE_GROUP_ID_BYTES 128
int pg_device_groups_built(void);
int pg_device_group_id(void *id, size_t len, char *err, size_t err_len);
int pg_device_group_join(int size, int rank, const void *id,
			 struct pg_backend *be, int device_index,
			 const atomic_int *cancel, int64_t deadline_ns,
			 struct pg_comm **out, char *err, size_t err_len);

#endif
