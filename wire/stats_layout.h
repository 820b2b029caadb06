/*
 * stats_layout.h - the layout of pagodad's statistics segments: the one
 * definition that the daemon (daemon/stats.c, the writer) and pagodactl
 * (the readers) share.  Not an API for requests: nothing here is sent
 * over a socket.
 *
 * Two files in the runtime directory (tmpfs), by default beside the
 * client socket:
 *
 *   the public figures (/run/pagoda/pagodad.stats), mode 0644 (0640 and
 *   the socket's group when that group exists): who may use the daemon
 *   may see how busy it is.
 *
 *     [struct pg_stats_header]    4096 bytes: identity, static facts about
 *                                 the model and plan, counters and gauges
 *     [struct pg_stats_device]    × n_devices, at dev_off
 *     [struct pg_stats_hist]      × PG_STATS_N_HIST, at hist_off
 *
 *   the per-client table (/run/pagoda/pagodad.clients, the public file's
 *   name with .clients for .stats: pg_stats_clients_path), mode 0640 in
 *   the admin group, else 0600: who runs what (pid, uid, command name)
 *   is for root, the daemon's user and the admin group only, the same
 *   people the admin socket serves.
 *
 *     [struct pg_stats_clients_header]   128 bytes
 *     [struct pg_stats_client]           × n_slots, at slot_off
 *
 * The daemon maps both shared and writes them; readers open them
 * O_RDONLY and map them PROT_READ, so no reader can change what another
 * sees, and nothing a reader does can make the daemon wait.
 *
 * Consistency: one sequence counter (a seqlock) covers each segment.
 * The writer makes it odd, writes, and makes it even again; it never
 * waits.  A reader loads it (acquire), retries while it is odd, copies
 * the segment, fences (acquire), and retries when the counter moved.  The
 * daemon publishes at most every interval_ms while busy, and once more
 * before its loop sleeps, so an idle daemon's figures are final.  The two
 * files are published one after the other, each whole; a reader matches
 * them by generation.
 *
 * Counters only grow, except through an administrator's `pagodactl stats
 * reset` (reset_uptime_ns then says when); gauges are the state at the
 * last publication.  Times are nanoseconds in integers, so that no field
 * needs floating point to be exact.  Strings are as their source gave
 * them (a client's command name is its own choice): show them through
 * common/escape.h.
 *
 * Growing: a new counter or gauge takes its room from a struct's
 * reserved words, which every writer leaves zero, and keeps the version:
 * a reader older than the field never looks at it, and a newer reader
 * of an older daemon reads 0 there (say so beside the field).  Moving,
 * resizing or redefining a field changes PG_STATS_VERSION, which readers
 * require to be theirs.
 */
#ifndef PAGODA_WIRE_STATS_LAYOUT_H
#define PAGODA_WIRE_STATS_LAYOUT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#define PG_STATS_MAGIC 0x54534750u	/* "PGST" */
#define PG_STATS_VERSION 2u
#define PG_STATS_CLIENTS_MAGIC 0x43534750u	/* "PGSC" */

#define PG_STATS_HEADER_BYTES 4096

/*
 * Histogram buckets: upper bounds 10 us × 10^(i/4) for i = 0 .. 28 (four
 * per decade, 10 us to 100 s), then +Inf.  The bounds are also written in
 * the header (bucket_le_ns), so a reader needs no formula.
 */
#define PG_STATS_N_BUCKETS 30

enum pg_stats_hist_id {
	PG_STATS_H_TTFT = 0,	/* submission to first token, per sample */
	PG_STATS_H_ITL,		/* between two tokens of a sample, per token */
	PG_STATS_H_QUEUE,	/* submission to first admission, per request */
	PG_STATS_H_LATENCY,	/* submission to last token, per sample */
	PG_STATS_H_STEP,	/* one engine step (pg_engine_step) */
	PG_STATS_N_HIST
};

enum pg_stats_state {
	PG_STATS_STARTING = 0,
	PG_STATS_SERVING = 1,
	PG_STATS_DRAINING = 2,	/* not admitting new requests */
	PG_STATS_STOPPED = 3,	/* the daemon has stopped */
};

/* Counters (total) and gauges (now), all under the seqlock. */
struct pg_stats_counters {
	/* requests */
	uint64_t requests_inflight;	/* gauge: GENERATE requests in flight */
	uint64_t seqs_running;		/* gauge: sequences holding KV pages */
	uint64_t seqs_waiting;		/* gauge: sequences queued */
	uint64_t requests_submitted;	/* accepted into the engine */
	uint64_t requests_done;		/* finished: stop, length or grammar */
	uint64_t requests_failed;	/* finished with an engine error */
	uint64_t requests_cancelled;
	uint64_t requests_refused;	/* PG_EBUSY while draining */
	/* tokens */
	uint64_t prompt_tokens;		/* of submitted requests */
	uint64_t cached_tokens;		/* of those, from the prefix cache */
	uint64_t generated_tokens;
	uint64_t forward_tokens;	/* through the forward pass */
	uint64_t steps;			/* engine steps that ran a batch */
	uint64_t step_errors;		/* steps whose forward pass failed */
	uint64_t preemptions;
	/* KV pool: gauges in pages and token slots */
	uint64_t kv_pages;
	uint64_t kv_free;
	uint64_t kv_used;		/* referenced by sequences */
	uint64_t kv_cached;		/* unreferenced, kept for the prefix cache */
	uint64_t kv_slots_used;		/* token slots written in used pages */
	uint64_t kv_slots_waste;	/* used pages' slots not (yet) written */
	/* prefix cache: counters */
	uint64_t prefix_queries;
	uint64_t prefix_query_tokens;
	uint64_t prefix_hit_pages;
	uint64_t prefix_hit_tokens;
	uint64_t prefix_evictions;	/* cached pages dropped, any reason */
	uint64_t admin_evicted_pages;	/* of those, by pagodactl evict */
	uint64_t cow_copies;
	/* clients */
	uint64_t clients_connected;	/* gauge */
	uint64_t admin_commands;	/* admin commands answered */
	/* structured output (0 from a daemon before them) */
	uint64_t grammar_samples;	/* samples submitted under a grammar
					   or JSON Schema */
	uint64_t grammar_failures;	/* of those, ended because the grammar
					   allowed no token (finish grammar) */
	uint64_t reserved[32];
};
static_assert(sizeof(struct pg_stats_counters) == 512, "pg_stats_counters");

struct pg_stats_header {
	uint32_t magic;			/* PG_STATS_MAGIC */
	uint32_t version;		/* PG_STATS_VERSION */
	uint32_t header_bytes;		/* PG_STATS_HEADER_BYTES */
	uint32_t total_bytes;		/* the whole segment (= the file) */
	_Atomic uint64_t seq;		/* the seqlock: odd while writing */
	uint64_t generation;		/* as in pg_welcome */
	int32_t pid;			/* the daemon's */
	uint32_t state;			/* enum pg_stats_state */
	uint64_t pid_start_ticks;	/* field 22 of /proc/PID/stat: a reused
					   pid is told from the daemon */
	int64_t start_unix_ns;		/* CLOCK_REALTIME at start */
	int64_t updated_unix_ns;	/* at the last publication */
	uint64_t uptime_ns;		/* CLOCK_MONOTONIC since start, at the
					   last publication */
	uint64_t reset_uptime_ns;	/* uptime of the last reset (0: none) */
	uint64_t n_updates;		/* publications so far */
	uint32_t interval_ms;		/* publication period while busy */
	/* where the arrays lie (offsets from the segment's start) */
	uint32_t n_devices;
	uint32_t dev_off;
	uint32_t reserved1, reserved2;
	uint32_t n_hist;		/* PG_STATS_N_HIST */
	uint32_t hist_off;
	uint32_t n_buckets;		/* PG_STATS_N_BUCKETS */
	uint64_t bucket_le_ns[PG_STATS_N_BUCKETS];	/* last: UINT64_MAX */
	/* the model, the plan, the limits: set at start */
	char model[128];
	char arch[16];
	char model_path[256];
	char plan[128];			/* how the plan was chosen */
	char isa[16];
	char socket[108];		/* the client socket */
	char admin_socket[108];		/* "" when there is none */
	char admin_group[32];		/* "" when only root may administer */
	uint32_t n_vocab, n_ctx_train, n_blocks, n_embd;
	uint32_t pp, tp, cp, n_threads;
	uint32_t page_tokens;
	uint32_t max_clients, max_inflight, max_prompt, max_tokens;
	uint32_t reserved0;
	/* figures */
	struct pg_stats_counters c;
	uint8_t reserved[PG_STATS_HEADER_BYTES - 1208 - sizeof(struct pg_stats_counters)];
};
static_assert(sizeof(struct pg_stats_header) == PG_STATS_HEADER_BYTES,
	      "pg_stats_header");
static_assert(offsetof(struct pg_stats_header, c) == 1208, "pg_stats_header.c");

/*
 * One device of the plan (pg_forward_device_stats): a step's time split
 * into compute and communication (waiting for peers included), bytes sent
 * and collectives, totals since start or the last reset.
 */
struct pg_stats_device {
	char name[16];			/* "cpu:0" */
	int32_t stage, tp_rank, cp_rank;
	int32_t first_block, n_blocks;
	uint32_t reserved0;
	uint64_t steps;			/* batches this device ran */
	uint64_t busy_ns;		/* compute + comm */
	uint64_t compute_ns;
	uint64_t comm_ns;
	uint64_t bytes_sent;
	uint64_t n_all_reduce, n_all_gather, n_send, n_recv;
	uint64_t reserved[2];
};
static_assert(sizeof(struct pg_stats_device) == 128, "pg_stats_device");

/*
 * The per-client table's header.  generation and pid are the public
 * segment's, so a reader tells a table of the same daemon from a stale
 * one.
 */
struct pg_stats_clients_header {
	uint32_t magic;			/* PG_STATS_CLIENTS_MAGIC */
	uint32_t version;		/* PG_STATS_VERSION */
	uint32_t header_bytes;		/* sizeof(struct pg_stats_clients_header) */
	uint32_t total_bytes;		/* the whole segment (= the file) */
	_Atomic uint64_t seq;		/* the seqlock: odd while writing */
	uint64_t generation;		/* as in pg_stats_header */
	int32_t pid;			/* the daemon's */
	uint32_t n_slots;		/* = --max-clients */
	uint32_t slot_off;		/* where the slots lie */
	uint32_t reserved0;
	uint64_t reserved[10];
};
static_assert(sizeof(struct pg_stats_clients_header) == 128, "pg_stats_clients_header");

/* One connected client (id 0: the slot is empty). */
struct pg_stats_client {
	uint32_t id;			/* the daemon's client id */
	int32_t pid;
	uint32_t uid, gid;
	char comm[16];			/* its /proc/PID/comm at connection, as
					   the client set it (any bytes; NUL-
					   terminated unless 16 long) */
	int64_t connected_unix_ns;
	uint64_t inflight;		/* gauge: GENERATE requests in flight */
	uint64_t requests;		/* accepted since it connected */
	uint64_t done;			/* finished (any reason) */
	uint64_t prompt_tokens;
	uint64_t generated_tokens;
	uint64_t reserved[6];
};
static_assert(sizeof(struct pg_stats_client) == 128, "pg_stats_client");

/* A histogram of durations: counts per bucket (not cumulative). */
struct pg_stats_hist {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t bucket[PG_STATS_N_BUCKETS];
};
static_assert(sizeof(struct pg_stats_hist) == 256, "pg_stats_hist");

/* The bytes the public segment takes (every array 64-aligned). */
static inline uint64_t pg_stats_bytes(uint32_t n_devices)
{
	return PG_STATS_HEADER_BYTES +
	       (uint64_t)n_devices * sizeof(struct pg_stats_device) +
	       (uint64_t)PG_STATS_N_HIST * sizeof(struct pg_stats_hist);
}

/* The bytes the per-client table of n_slots slots takes. */
static inline uint64_t pg_stats_clients_bytes(uint32_t n_slots)
{
	return sizeof(struct pg_stats_clients_header) +
	       (uint64_t)n_slots * sizeof(struct pg_stats_client);
}

/*
 * pg_stats_path_beside - the default path of a file that goes with the
 * client socket `socket`: its name without ".sock", then `suffix`
 * (/run/pagoda/pagodad.sock, ".stats" -> /run/pagoda/pagodad.stats).
 * The daemon and pagodactl derive the statistics segment's and the admin
 * socket's default paths with it.  Returns 0, or -1 when out is too small.
 */
static inline int pg_stats_path_beside(const char *socket, const char *suffix,
				       char *out, size_t out_len)
{
	size_t n = strlen(socket);
	int w;

	if (n >= 5 && !strcmp(socket + n - 5, ".sock"))
		n -= 5;
	w = snprintf(out, out_len, "%.*s%s", (int)n, socket, suffix);
	return w < 0 || (size_t)w >= out_len ? -1 : 0;
}

/*
 * pg_stats_clients_path - the per-client table's path for the public
 * segment at stats_path: its name with ".clients" for a final ".stats",
 * else with ".clients" added.  Returns 0, or -1 when out is too small.
 */
static inline int pg_stats_clients_path(const char *stats_path, char *out, size_t out_len)
{
	size_t n = strlen(stats_path);
	int w;

	if (n >= 6 && !strcmp(stats_path + n - 6, ".stats"))
		n -= 6;
	w = snprintf(out, out_len, "%.*s.clients", (int)n, stats_path);
	return w < 0 || (size_t)w >= out_len ? -1 : 0;
}

/*
 * pg_stats_pid_start - field 22 of /proc/PID/stat (the process's start
 * time in clock ticks since boot), or 0 when it cannot be read.  With the
 * pid it names one process: a pid reused after the daemon died has
 * another start time.
 */
static inline uint64_t pg_stats_pid_start(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long v = 0;
	FILE *f;
	size_t n;
	int field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');		/* the command may hold spaces */
	if (!p)
		return 0;
	for (field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &v) != 1)
		return 0;
	return v;
}

#endif
