/*
 * comms.c - the plan's communicator groups: one world group, a TP group
 * per (stage, CP rank) and a CP group per (stage, TP rank), over shared
 * memory between CPU devices, or NCCL between GPUs, whose handles every
 * device thread creates together before its first batch (fw_join_nccl), each
 * giving up when another has failed or the deadline has passed.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/comm.h"
#include "kernels/registry.h"
#include "common/clock.h"
#include "daemon/engine/forward_impl.h"

/*
 * How long a device waiting for its peers spins before it sleeps: long
 * (1 ms) when every device thread has a CPU of its own, since a futex
 * wake-up costs tens of microseconds on every collective; short (20 us)
 * when the devices' threads outnumber the CPUs, so that a waiting device
 * does not hold the CPU its peer needs.
 */
static int64_t comm_spin_ns(const struct pg_forward *fw)
{
	cpu_set_t set;
	int threads = 0, cpus;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 20000;
	cpus = CPU_COUNT(&set);
	threads = pg_forward_threads(fw);
	return threads <= cpus ? 1000000 : 20000;
}

/*
 * GPUs: one NCCL unique id per group (world, each TP group, each CP group),
 * made here; the device threads then create their handles together, since
 * an NCCL group's creation returns only when all its ranks have joined.
 * Only the groups that exist get an id: each id starts an NCCL bootstrap
 * thread that waits until its ranks have come.
 */
static int make_nccl_ids(struct pg_forward *fw, char *err, size_t err_len)
{
	const struct pg_plan *pl = &fw->plan;
	int n_tp = pl->pp * pl->cp;	/* ids 1 .. n_tp: the TP groups */
	int n = 1 + n_tp + pl->pp * pl->tp;	/* then the CP groups */
	char why[256];

	if (!pg_device_groups_built()) {
		snprintf(err, err_len, "a plan of several CUDA devices needs NCCL, which this pagodad was built without; install NCCL and rebuild");
		return -ENOTSUP;
	}
	fw->nccl_ids = calloc((size_t)n, PG_DEVICE_GROUP_ID_BYTES);
	if (!fw->nccl_ids) {
		snprintf(err, err_len, "cannot make the GPUs' NCCL groups: out of memory");
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		if (i > 0 && (i <= n_tp ? pl->tp == 1 : pl->cp == 1))
			continue;	/* a group that this plan has not */
		if (pg_device_group_id(fw->nccl_ids +
				       (size_t)i * PG_DEVICE_GROUP_ID_BYTES,
				       PG_DEVICE_GROUP_ID_BYTES, why,
				       sizeof(why))) {
			snprintf(err, err_len, "cannot make the GPUs' NCCL groups: %s",
				 why);
			return -EIO;
		}
	}
	return 0;
}

/*
 * In device d's thread: create its NCCL handles, world then TP then CP,
 * in the same order on every device.  Each creation gives up when another
 * device has failed (fw->nccl_cancel) or the deadline has passed; a
 * failure here sets fw->nccl_cancel for the others and aborts the groups
 * this device has joined, so that destroying them waits for nobody.
 * 0, or -errno with a message.
 */
int fw_join_nccl(struct device *d, char *err, size_t err_len)
{
	struct pg_forward *fw = d->fw;
	const struct pg_plan *pl = &fw->plan;
	const uint8_t *ids = fw->nccl_ids;
	int dev = d->info->index, g, rc;
	size_t B = PG_DEVICE_GROUP_ID_BYTES;
	const char *what = "the world group";
	char why[256] = "";

	rc = pg_device_group_join(fw->n_dev, d->index, ids, d->be, dev,
				  &fw->nccl_cancel, fw->nccl_deadline_ns,
				  &d->world, why, sizeof(why));
	if (!rc && pl->tp > 1) {
		what = "its tensor-parallel group";
		g = d->stage * pl->cp + d->c;
		rc = pg_device_group_join(pl->tp, d->t,
					  ids + (size_t)(1 + g) * B, d->be,
					  dev, &fw->nccl_cancel,
					  fw->nccl_deadline_ns, &d->tp, why,
					  sizeof(why));
	}
	if (!rc && pl->cp > 1) {
		what = "its context-parallel group";
		g = d->stage * pl->tp + d->t;
		rc = pg_device_group_join(pl->cp, d->c,
					  ids + (size_t)(1 + pl->pp * pl->cp + g) * B,
					  d->be, dev, &fw->nccl_cancel,
					  fw->nccl_deadline_ns, &d->cp, why,
					  sizeof(why));
	}
	if (!rc)
		return 0;
	atomic_store(&fw->nccl_cancel, 1);
	fw_abort_device(d);
	if (rc == -ETIMEDOUT)
		snprintf(err, err_len, "%s: not formed within %d s (PAGODA_NCCL_TIMEOUT): %s",
			 what, fw->nccl_timeout_s, why);
	else
		snprintf(err, err_len, "%s: %s", what, why);
	return rc;
}

/* The communicator groups: one world, a TP group per (stage, c), a CP
 * group per (stage, t). */
int fw_setup_comms(struct pg_forward *fw, char *err, size_t err_len)
{
	const struct pg_plan *pl = &fw->plan;
	int64_t spin;
	int rc;

	if (fw->gpus)
		return make_nccl_ids(fw, err, err_len);
	rc = pg_host_group_create(fw->n_dev, &fw->g_world);
	fw->n_g_tp = pl->pp * pl->cp;
	fw->n_g_cp = pl->pp * pl->tp;
	fw->g_tp = calloc((size_t)fw->n_g_tp, sizeof(*fw->g_tp));
	fw->g_cp = calloc((size_t)fw->n_g_cp, sizeof(*fw->g_cp));
	if (rc || !fw->g_tp || !fw->g_cp)
		goto fail;
	for (int i = 0; i < fw->n_g_tp && pl->tp > 1; i++)
		if ((rc = pg_host_group_create(pl->tp, &fw->g_tp[i])))
			goto fail;
	for (int i = 0; i < fw->n_g_cp && pl->cp > 1; i++)
		if ((rc = pg_host_group_create(pl->cp, &fw->g_cp[i])))
			goto fail;
	spin = comm_spin_ns(fw);
	pg_host_group_set_spin(fw->g_world, spin);
	for (int i = 0; i < fw->n_g_tp && pl->tp > 1; i++)
		pg_host_group_set_spin(fw->g_tp[i], spin);
	for (int i = 0; i < fw->n_g_cp && pl->cp > 1; i++)
		pg_host_group_set_spin(fw->g_cp[i], spin);
	for (int i = 0; i < fw->n_dev; i++) {
		struct device *d = &fw->dev[i];

		d->world = pg_host_group_join(fw->g_world, i);
		if (!d->world)
			goto fail_errno;
		if (pl->tp > 1 &&
		    !(d->tp = pg_host_group_join(fw->g_tp[d->stage * pl->cp + d->c], d->t)))
			goto fail_errno;
		if (pl->cp > 1 &&
		    !(d->cp = pg_host_group_join(fw->g_cp[d->stage * pl->tp + d->t], d->c)))
			goto fail_errno;
	}
	return 0;
fail_errno:
	rc = -errno;
fail:
	if (!rc)
		rc = -ENOMEM;
	snprintf(err, err_len, "cannot set up the devices' communicators: %s",
		 strerror(-rc));
	return rc;
}
