/*
 * control.c - the narrow way into the serving daemon for the modules that
 * do not see struct pgd (control.h): each function reads or changes one
 * thing of struct pgd, the engine or the statistics, for the admin socket;
 * and the statistics' publications, fed with what the daemon looks like.
 * Not the admin protocol (admin.c) nor the figures (stats.c).  Calls
 * session.c (pgd_mark_dead), the engine and stats.c; nothing calls back.
 */
#include <stdint.h>

#include "common/clock.h"
#include "daemon/control.h"
#include "daemon/daemon.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/forward.h"
#include "daemon/engine/model.h"
#include "daemon/engine/tokenizer.h"
#include "daemon/stats.h"

const struct pgd_config *pgd_ctl_config(const struct pgd *d)
{
	return d->cfg;
}

struct pgd_loop *pgd_ctl_loop(struct pgd *d)
{
	return &d->loop;
}

int pgd_ctl_stopping(const struct pgd *d)
{
	return d->stop_signal != 0;
}

void pgd_ctl_load(const struct pgd *d, struct pgd_ctl_load *out)
{
	struct pg_engine_stats st;

	pg_engine_stats(d->engine, &st);
	out->draining = d->draining;
	out->stopping = d->stop_signal != 0;
	out->clients = d->n_live;
	out->running = st.n_running;
	out->waiting = st.n_waiting;
	out->inflight = 0;
	for (int i = 0; i < d->n_live; i++)
		out->inflight += d->live[i]->n_inflight;
	out->kv_pages = st.kv.n_pages;
	out->kv_cached = st.kv.n_cached;
	out->kv_used = st.kv.n_used;
	out->kv_free = st.kv.n_free;
	out->page_tokens = pg_forward_page_tokens(d->fw);
	out->model = d->m->name;
}

int pgd_ctl_set_draining(struct pgd *d, int on)
{
	int was = d->draining;

	d->draining = !!on;
	return was;
}

int pgd_ctl_draining(const struct pgd *d)
{
	return d->draining;
}

int pgd_ctl_idle(const struct pgd *d)
{
	return pgd_idle(d);
}

int64_t pgd_ctl_tokenize_prefix(struct pgd *d, const char *text, size_t len,
				const int32_t **ids, int *cap)
{
	*ids = d->ids;
	*cap = d->ids_cap;
	return pg_tokenize(d->m->tok, text, len, 1, 1, d->ids, d->ids_cap);
}

int pgd_ctl_evict(struct pgd *d, const struct pg_kvc_evict *ev, const char **why)
{
	int n = pg_engine_evict(d->engine, ev);

	if (n < 0) {
		*why = pg_engine_last_error(d->engine);
		return -1;
	}
	pgd_stats_evicted(d->stats, n);
	return n;
}

static void client_info(const struct pgd *d, const struct pgd_client *c,
			struct pgd_ctl_client *out)
{
	out->id = c->id;
	out->pid = c->pid;
	out->uid = c->uid;
	out->gid = c->gid;
	out->inflight = c->n_inflight;
	out->connected_s = d->now - c->since;
	pgd_stats_client(d->stats, c->slot, c->id, &out->requests, &out->tokens);
}

int pgd_ctl_client_at(const struct pgd *d, int slot, struct pgd_ctl_client *out)
{
	const struct pgd_client *c;

	if (slot < 0 || slot >= d->cfg->max_clients)
		return -1;
	c = d->slots[slot];
	if (!c || c->dead)
		return 0;
	client_info(d, c, out);
	return 1;
}

int pgd_ctl_disconnect(struct pgd *d, uint64_t id, uid_t by,
		       struct pgd_ctl_client *out)
{
	struct pgd_client *c = NULL;

	for (int i = 0; i < d->cfg->max_clients && !c; i++)
		if (d->slots[i] && d->slots[i]->id == id)
			c = d->slots[i];
	if (!c || c->dead)
		return -1;
	client_info(d, c, out);
	pgd_mark_dead(d, c, PG_ESHUTDOWN, "disconnected by an administrator of pagodad (uid %u)",
		      (unsigned)by);
	return 0;
}

/* One publication of the statistics, at monotonic `at`. */
static void publish(const struct pgd *d, double at)
{
	struct pgd_stats_view v = { .draining = d->draining, .clients = d->n_live,
				    .serial = d->next_serial };

	for (int i = 0; i < d->n_live; i++)
		v.inflight += (uint64_t)d->live[i]->n_inflight;
	pgd_stats_publish_begin(d->stats, &v);
	for (int i = 0; i < d->cfg->max_clients; i++) {
		const struct pgd_client *c = d->slots[i];
		struct pgd_stats_conn conn;

		if (c)
			conn = (struct pgd_stats_conn){ .id = c->id, .pid = c->pid,
							.uid = c->uid, .gid = c->gid,
							.since = c->since,
							.inflight = c->n_inflight };
		pgd_stats_publish_client(d->stats, (uint32_t)i, c ? &conn : NULL);
	}
	pgd_stats_publish_end(d->stats, at);
}

void pgd_ctl_publish(struct pgd *d, enum pgd_ctl_publish when)
{
	if (!d->stats)
		return;
	if (when == PGD_CTL_PUBLISH_NOW)
		publish(d, pg_now_s());
	else if (pgd_stats_due(d->stats, d->now, d->n_live, d->next_serial,
			       when == PGD_CTL_PUBLISH_CHANGED))
		publish(d, d->now);
}

int pgd_ctl_stats_reset(struct pgd *d)
{
	if (!d->stats)
		return -1;
	pgd_stats_reset(d->stats);
	publish(d, d->now);
	return 0;
}

int pgd_ctl_engine_errors(const struct pgd *d, double window_s, double *since_last)
{
	int errors = pgd_stats_engine_errors(d->stats, window_s, since_last);

	if (!d->stats)
		errors = d->step_errors > 0;
	return errors;
}

void pgd_ctl_answered(struct pgd *d)
{
	pgd_stats_admin_command(d->stats);
	pgd_ctl_publish(d, PGD_CTL_PUBLISH_CHANGED);
}
