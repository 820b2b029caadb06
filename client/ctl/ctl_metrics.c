/*
 * ctl_metrics.c - `pagodactl metrics`: the statistics segment in the
 * Prometheus text exposition format (version 0.0.4), for node_exporter's
 * textfile collector or a scrape through a small wrapper.
 *
 * Every family has its # HELP and # TYPE lines; counters end in _total;
 * times are in seconds, sizes in bytes; histograms give cumulative
 * _bucket{le=...} lines ending with le="+Inf", then _sum and _count.
 * Label values are escaped as the format says (\\, \", \n), after the
 * controls and invalid bytes a client may have put in its command name
 * were made printable (common/escape.h, PG_ESCAPE_PROM): the scraped value
 * reads as `pagodactl stats` shows it.  The per-client families are
 * there only for a user who may read the per-client table; for others a
 * comment says why they are missing.
 */
#include <stdio.h>
#include <string.h>

#include "client/ctl/ctl.h"
#include "common/escape.h"

static void help_type(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A sample's value: whole numbers as such, others with nine decimals. */
static void value(FILE *f, double v)
{
	if (v >= 0 && v < 9007199254740992.0 && v == (double)(uint64_t)v)
		fprintf(f, " %llu\n", (unsigned long long)v);
	else
		fprintf(f, " %.9f\n", v);
}

static void metric(FILE *f, const char *name, const char *type, const char *help,
		   double v)
{
	help_type(f, name, type, help);
	fputs(name, f);
	value(f, v);
}

static void label_value(FILE *f, const char *s, size_t max)
{
	ctl_put_escaped(f, s, max, PG_ESCAPE_PROM);
}

static void info(FILE *f, const struct pg_stats_header *h)
{
	help_type(f, "pagoda_info", "gauge", "The daemon's model and plan (value 1).");
	fprintf(f, "pagoda_info{model=\"");
	label_value(f, h->model, sizeof(h->model));
	fprintf(f, "\",arch=\"");
	label_value(f, h->arch, sizeof(h->arch));
	fprintf(f, "\",pid=\"%d\",generation=\"%016llx\",pp=\"%u\",tp=\"%u\",cp=\"%u\",isa=\"",
		h->pid, (unsigned long long)h->generation, h->pp, h->tp, h->cp);
	label_value(f, h->isa, sizeof(h->isa));
	fprintf(f, "\"} 1\n");
}

static void requests(FILE *f, const struct pg_stats_counters *c)
{
	metric(f, "pagoda_requests_running", "gauge", "Sequences holding KV pages now.", (double)c->seqs_running);
	metric(f, "pagoda_requests_waiting", "gauge", "Sequences queued for admission now.", (double)c->seqs_waiting);
	metric(f, "pagoda_requests_inflight", "gauge", "GENERATE requests in flight now.", (double)c->requests_inflight);
	metric(f, "pagoda_requests_submitted_total", "counter", "Requests accepted into the engine.", (double)c->requests_submitted);
	help_type(f, "pagoda_requests_total", "counter", "Requests ended, by outcome (refused: while draining).");
	fprintf(f, "pagoda_requests_total{outcome=\"done\"} %llu\n", (unsigned long long)c->requests_done);
	fprintf(f, "pagoda_requests_total{outcome=\"failed\"} %llu\n", (unsigned long long)c->requests_failed);
	fprintf(f, "pagoda_requests_total{outcome=\"cancelled\"} %llu\n", (unsigned long long)c->requests_cancelled);
	fprintf(f, "pagoda_requests_total{outcome=\"refused\"} %llu\n", (unsigned long long)c->requests_refused);
	metric(f, "pagoda_prompt_tokens_total", "counter", "Prompt tokens of submitted requests.", (double)c->prompt_tokens);
	metric(f, "pagoda_prompt_cached_tokens_total", "counter", "Prompt tokens the prefix cache supplied.", (double)c->cached_tokens);
	metric(f, "pagoda_tokens_generated_total", "counter", "Tokens generated.", (double)c->generated_tokens);
	metric(f, "pagoda_forward_tokens_total", "counter", "Tokens put through the forward pass.", (double)c->forward_tokens);
	metric(f, "pagoda_engine_steps_total", "counter", "Engine steps that ran a batch.", (double)c->steps);
	metric(f, "pagoda_engine_step_errors_total", "counter", "Engine steps whose forward pass failed.", (double)c->step_errors);
	metric(f, "pagoda_preemptions_total", "counter", "Sequences preempted for want of KV pages.", (double)c->preemptions);
}

static void grammar(FILE *f, const struct pg_stats_counters *c)
{
	metric(f, "pagoda_grammar_samples_total", "counter", "Samples submitted under a grammar or JSON Schema.", (double)c->grammar_samples);
	metric(f, "pagoda_grammar_failures_total", "counter", "Samples ended because their grammar allowed no token (finish reason grammar).", (double)c->grammar_failures);
}

static void kv(FILE *f, const struct pg_stats_counters *c)
{
	metric(f, "pagoda_kv_pool_pages", "gauge", "Pages in the KV pool.", (double)c->kv_pages);
	help_type(f, "pagoda_kv_pages", "gauge", "KV pages by state.");
	fprintf(f, "pagoda_kv_pages{state=\"used\"} %llu\n", (unsigned long long)c->kv_used);
	fprintf(f, "pagoda_kv_pages{state=\"cached\"} %llu\n", (unsigned long long)c->kv_cached);
	fprintf(f, "pagoda_kv_pages{state=\"free\"} %llu\n", (unsigned long long)c->kv_free);
	metric(f, "pagoda_kv_cache_usage_ratio", "gauge", "Used pages over the pool's pages.",
	       c->kv_pages ? (double)c->kv_used / (double)c->kv_pages : 0.0);
	metric(f, "pagoda_kv_slots_used", "gauge", "Token slots written in used pages.", (double)c->kv_slots_used);
	metric(f, "pagoda_kv_slots_waste", "gauge", "Token slots of used pages not written.", (double)c->kv_slots_waste);
	metric(f, "pagoda_prefix_cache_queries_total", "counter", "Prefix-cache lookups.", (double)c->prefix_queries);
	metric(f, "pagoda_prefix_cache_query_tokens_total", "counter", "Tokens looked up in the prefix cache.", (double)c->prefix_query_tokens);
	metric(f, "pagoda_prefix_cache_hits_total", "counter", "Pages the prefix cache supplied.", (double)c->prefix_hit_pages);
	metric(f, "pagoda_prefix_cache_hit_tokens_total", "counter", "Tokens those pages held.", (double)c->prefix_hit_tokens);
	metric(f, "pagoda_prefix_cache_evictions_total", "counter", "Cached pages evicted, for room or by an administrator.", (double)c->prefix_evictions);
	metric(f, "pagoda_prefix_cache_admin_evictions_total", "counter", "Cached pages evicted by pagodactl evict.", (double)c->admin_evicted_pages);
	metric(f, "pagoda_kv_cow_copies_total", "counter", "KV pages copied on write.", (double)c->cow_copies);
}

/* One family of per-device figures. */
static void device_family(FILE *f, const struct ctl_snap *s, const char *name,
			  const char *type, const char *help, int which)
{
	help_type(f, name, type, help);
	for (uint32_t i = 0; i < s->h->n_devices; i++) {
		const struct pg_stats_device *d = &s->dev[i];
		double v = 0;

		switch (which) {
		case 0: v = (double)d->steps; break;
		case 1: v = (double)d->compute_ns * 1e-9; break;
		case 2: v = (double)d->comm_ns * 1e-9; break;
		case 3: v = (double)d->bytes_sent; break;
		case 4: v = (double)d->n_all_reduce; break;
		case 5: v = (double)d->n_all_gather; break;
		case 6: v = (double)d->n_send; break;
		case 7: v = (double)d->n_recv; break;
		}
		fprintf(f, "%s{device=\"", name);
		label_value(f, d->name, sizeof(d->name));
		fprintf(f, "\",stage=\"%d\",tp_rank=\"%d\",cp_rank=\"%d\"}",
			d->stage, d->tp_rank, d->cp_rank);
		value(f, v);
	}
}

static void devices(FILE *f, const struct ctl_snap *s)
{
	device_family(f, s, "pagoda_device_steps_total", "counter", "Batches a device ran.", 0);
	device_family(f, s, "pagoda_device_compute_seconds_total", "counter", "A device's time computing.", 1);
	device_family(f, s, "pagoda_device_comm_seconds_total", "counter", "A device's time in communication, waiting for peers included.", 2);
	device_family(f, s, "pagoda_device_bytes_sent_total", "counter", "Bytes a device sent to other devices.", 3);
	device_family(f, s, "pagoda_allreduce_total", "counter", "All-reduce operations of a device.", 4);
	device_family(f, s, "pagoda_allgather_total", "counter", "All-gather operations of a device.", 5);
	device_family(f, s, "pagoda_device_sends_total", "counter", "Point-to-point sends of a device.", 6);
	device_family(f, s, "pagoda_device_recvs_total", "counter", "Point-to-point receives of a device.", 7);
}

static const char *const hist_help[PG_STATS_N_HIST] = {
	"Submission to first token, per sample.",
	"Time between two tokens of a sample.",
	"Submission to first admission, per request.",
	"Submission to last token, per sample.",
	"One engine step.",
};

static const char *const hist_metric[PG_STATS_N_HIST] = {
	"pagoda_time_to_first_token_seconds", "pagoda_inter_token_latency_seconds",
	"pagoda_queue_time_seconds", "pagoda_request_latency_seconds",
	"pagoda_step_seconds",
};

static void histogram(FILE *f, const struct ctl_snap *s, int id)
{
	const struct pg_stats_hist *h = &s->hist[id];
	const char *name = hist_metric[id];
	uint64_t cum = 0;

	help_type(f, name, "histogram", hist_help[id]);
	for (int i = 0; i < PG_STATS_N_BUCKETS - 1; i++) {
		cum += h->bucket[i];
		fprintf(f, "%s_bucket{le=\"%.6g\"} %llu\n", name,
			(double)s->h->bucket_le_ns[i] * 1e-9, (unsigned long long)cum);
	}
	cum += h->bucket[PG_STATS_N_BUCKETS - 1];
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	fprintf(f, "%s_sum %.9f\n", name, (double)h->sum_ns * 1e-9);
	fprintf(f, "%s_count %llu\n", name, (unsigned long long)h->count);
}

static void client_family(FILE *f, const struct ctl_snap *s, const char *name,
			  const char *type, const char *help, int which)
{
	help_type(f, name, type, help);
	for (uint32_t i = 0; i < s->n_cli; i++) {
		const struct pg_stats_client *c = &s->cli[i];
		uint64_t v = which == 0 ? c->inflight : which == 1 ? c->requests
								  : c->generated_tokens;

		if (!c->id)
			continue;
		fprintf(f, "%s{client=\"%u\",pid=\"%d\",uid=\"%u\",comm=\"", name, c->id, c->pid, c->uid);
		label_value(f, c->comm, sizeof(c->comm));
		fprintf(f, "\"} %llu\n", (unsigned long long)v);
	}
}

static void clients(FILE *f, const struct ctl_snap *s)
{
	metric(f, "pagoda_clients_connected", "gauge", "Clients connected now.",
	       (double)s->h->c.clients_connected);
	metric(f, "pagoda_admin_commands_total", "counter", "Admin commands answered.",
	       (double)s->h->c.admin_commands);
	if (!s->cli) {
		fputs("# no per-client figures: ", f);
		ctl_put_escaped(f, s->cli_note, sizeof(s->cli_note), PG_ESCAPE_TEXT);
		fputc('\n', f);
		return;
	}
	client_family(f, s, "pagoda_client_requests_inflight", "gauge", "A client's requests in flight.", 0);
	client_family(f, s, "pagoda_client_requests_total", "counter", "Requests a client submitted since it connected.", 1);
	client_family(f, s, "pagoda_client_tokens_generated_total", "counter", "Tokens generated for a client since it connected.", 2);
}

int ctl_metrics_write(FILE *f, const struct ctl_snap *s)
{
	info(f, s->h);
	metric(f, "pagoda_up", "gauge", "1 while pagodad serves.", 1);
	metric(f, "pagoda_draining", "gauge", "1 while pagodad refuses new requests.",
	       s->h->state == PG_STATS_DRAINING);
	metric(f, "pagoda_uptime_seconds", "gauge", "Seconds since pagodad started.",
	       (double)(s->read_unix_ns - s->h->start_unix_ns) * 1e-9);
	requests(f, &s->h->c);
	grammar(f, &s->h->c);
	kv(f, &s->h->c);
	devices(f, s);
	for (int i = 0; i < PG_STATS_N_HIST; i++)
		histogram(f, s, i);
	clients(f, s);
	return ferror(f) ? -1 : 0;
}

int ctl_cmd_metrics(const struct ctl_opts *o)
{
	struct ctl_seg seg;
	struct ctl_snap s = { 0 };
	char err[512];
	int rc = ctl_seg_open(o->stats_path, &seg, err, sizeof(err));

	if (!rc) {
		rc = ctl_seg_read(&seg, &s, err, sizeof(err));
		ctl_seg_close(&seg);
	}
	if (rc) {
		fprintf(stderr, "pagodactl: %s\n", err);
		return rc;
	}
	ctl_metrics_write(stdout, &s);
	ctl_snap_free(&s);
	return fflush(stdout) ? CTL_FAIL : CTL_OK;
}
