/*
 * server.h - the serving daemon: a Unix socket for handshakes, one
 * shared-memory segment per client (wire/client_proto.h), and one thread
 * that runs the io_uring loop and the engine.  pagodad's command line
 * (pagodad.c) fills a struct pgd_config, loads the model, builds the forward pass and
 * calls pgd_serve(); tests drive the daemon through its socket.
 */
#ifndef PAGODA_DAEMON_SERVER_H
#define PAGODA_DAEMON_SERVER_H

#include <stdint.h>

struct pg_model;
struct pg_forward;
struct pgd_conf;

#define PGD_DEFAULT_SOCKET "/run/pagoda/pagodad.sock"
#define PGD_DEFAULT_GROUP "pagoda"

/*
 * The serving loop's settings; their defaults, ranges and meanings are
 * the keys' of the same names in settings.c's table.
 */
struct pgd_config {
	const char *socket_path;
	unsigned socket_mode;
	const char *socket_group;	/* NULL: "pagoda" when it exists,
					   else the daemon's group */
	const char *allow_users;	/* comma-separated names or uids; NULL:
					   anyone who can open the socket */
	const char *allow_groups;
	int max_clients;		/* connected at once */
	int max_inflight;		/* GENERATE requests per client */
	int max_prompt;			/* tokens; 0: the KV pool's capacity */
	int max_tokens;			/* per request */
	uint32_t max_payload;		/* bytes of one submission's payload;
					   0: the submission arena's size */
	uint32_t sq_slots, cq_slots;	/* ring entries */
	uint32_t sq_arena, cq_arena;	/* arena bytes */
	int spin_us;			/* polling before sleeping */
	double drain_timeout_s;		/* a client that leaves its completion
					   ring full this long is dropped */
	int max_batch_tokens;		/* engine: tokens per step (0: the
					   forward pass's batch) */
	int max_batch_seqs;		/* engine: sequences per step */
	int step_target_ms;		/* engine: a step's time while requests
					   decode; 0: auto (engine.h) */
	int chat_format;		/* enum pg_chat_format of chat requests;
					   -1: the one the template names */
	const char *admin_socket;	/* NULL: beside the socket,
					   <name>-admin.sock; "none": none */
	const char *admin_group;	/* NULL: pagoda-admin when it exists */
	const char *stats_path;		/* the statistics segment; NULL:
					   beside the socket; "none": none */
	int stats_interval_ms;		/* publication while busy; 0: the
					   statistics' default (stats.h) */
	const char *plan_desc;		/* for the start-up log line */
	int fault_injection;		/* PAGODA_FAULT_INJECTION: the admin
					   command FAULT is allowed (tests) */
	struct pgd_conf *conf;		/* the configuration this is part of,
					   read again on SIGHUP (config.h);
					   NULL: nothing to reload */
};

/*
 * pgd_block_signals - block SIGTERM, SIGINT and SIGHUP in the calling
 * thread, before any other thread is created (the forward pass's device
 * threads inherit the mask), so that only the loop's signalfd sees them;
 * and ignore SIGPIPE.  Returns 0 or -errno.
 */
int pgd_block_signals(void);

/*
 * pgd_serve - serve clients with model m and forward pass fw (both the
 * caller's, outliving the call) until SIGTERM or SIGINT.  Logs to standard
 * error (log.h).  Returns the process exit status: 0 after a clean stop, 1
 * when the daemon could not start (the log says why and what to change).
 */
int pgd_serve(const struct pgd_config *cfg, const struct pg_model *m,
	      struct pg_forward *fw);

#endif
