/*
 * bench/serve-daemon - bench/serve's concurrent load through pagodad and
 * libpagoda, to set beside the engine in-process (bench/serve-pagoda):
 * n requests (greedy, ignore_eos, --max-tokens each) submitted at once,
 * their prompts one a line from --prompts (bench/serve-pagoda
 * --dump-prompts), streamed to their end, two ways:
 *
 *   conns  one process holding n connections, waiting on all their
 *          descriptors with poll(2) (pagoda_fd);
 *   procs  n processes of one connection each, each asleep in
 *          pagoda_next_event() as `pagoda generate` is.
 *
 * Aggregate tokens/s = tokens received / (first submission to the last
 * request's end).  Its last line:
 *
 *   serve-daemon: tps_conns=A tps_procs=B n=N
 *
 * bench/serve starts pagodad, runs this and prints daemon_ratio.  Not a
 * test.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "include/pagoda.h"

#define MAX_REQ 64

struct opts {
	const char *socket, *prompts;
	int n, max_tokens;
};

static char *prompt[MAX_REQ];

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "serve-daemon: error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void load_prompts(const struct opts *o)
{
	FILE *f = fopen(o->prompts, "r");
	char line[8192];
	int n = 0;

	if (!f)
		die("%s: %s", o->prompts, strerror(errno));
	while (n < o->n && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!(prompt[n++] = strdup(line)))
			die("out of memory");
	}
	fclose(f);
	if (n < o->n)
		die("%s has %d prompts, %d wanted", o->prompts, n, o->n);
}

static pagoda_t *connect_or_die(const char *path)
{
	pagoda_t *p;
	int rc = pagoda_connect(path, &p);

	if (rc < 0)
		die("connecting to %s: %s", path, pagoda_strerror(rc));
	return p;
}

static void submit_or_die(pagoda_t *p, const struct opts *o, int i)
{
	struct pagoda_request req;
	int rc;

	pagoda_request_init(&req);
	req.prompt = prompt[i];
	req.max_tokens = o->max_tokens;
	req.ignore_eos = 1;
	req.temperature = 0;
	if ((rc = pagoda_submit(p, &req, NULL)) < 0)
		die("submitting: %s (%s)", pagoda_strerror(rc), pagoda_last_error(p));
}

/* Drain p's ready events: tokens counted into *tok; 1 once it is over. */
static int drain(pagoda_t *p, long *tok)
{
	struct pagoda_event ev;
	int rc;

	while ((rc = pagoda_next_event(p, &ev, 0)) == 1) {
		if (ev.type == PAGODA_EVENT_ERROR)
			die("a request failed: %s", ev.text ? ev.text : "?");
		if (ev.type == PAGODA_EVENT_TOKENS)
			*tok += (long)ev.n_ids;
		if (ev.last)
			return 1;
	}
	if (rc < 0)
		die("reading events: %s", pagoda_strerror(rc));
	return 0;
}

/* One process, n connections, poll(2) on their descriptors. */
static double run_conns(const struct opts *o, int n)
{
	pagoda_t *p[MAX_REQ];
	struct pollfd pfd[MAX_REQ];
	int over[MAX_REQ] = { 0 }, left = n;
	long tok = 0;
	uint64_t t0, t1;

	for (int i = 0; i < n; i++) {
		p[i] = connect_or_die(o->socket);
		pfd[i] = (struct pollfd){ .fd = pagoda_fd(p[i]), .events = POLLIN };
		if (pfd[i].fd < 0)
			die("pagoda_fd: %s", pagoda_strerror(pfd[i].fd));
	}
	t0 = pg_now_ns();
	for (int i = 0; i < n; i++)
		submit_or_die(p[i], o, i);
	while (left) {
		for (int i = 0; i < n; i++)
			if (!over[i] && drain(p[i], &tok)) {
				over[i] = 1;
				pfd[i].fd = -1;
				left--;
			}
		if (left && poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
	}
	t1 = pg_now_ns();
	for (int i = 0; i < n; i++)
		pagoda_close(p[i]);
	return (double)tok / ((double)(t1 - t0) / 1e9);
}

struct proc_log {
	_Alignas(64) long tok;
	uint64_t end_ns;
	int status;
};

/* n processes of one connection each, started together by a pipe. */
static double run_procs(const struct opts *o, int n)
{
	struct proc_log *lg = mmap(NULL, sizeof(*lg) * MAX_REQ, PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int start[2], st, bad = 0;
	uint64_t t0, t1 = 0;
	long tok = 0;

	if (lg == MAP_FAILED || pipe(start) < 0)
		die("out of memory");
	fflush(NULL);
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0) {
			pagoda_t *p = connect_or_die(o->socket);
			struct pagoda_event ev;
			char b;
			int rc;

			close(start[1]);
			if (read(start[0], &b, 1) < 0)
				_exit(3);
			submit_or_die(p, o, i);
			while ((rc = pagoda_next_event(p, &ev, -1)) == 1) {
				if (ev.type == PAGODA_EVENT_ERROR)
					_exit(5);
				if (ev.type == PAGODA_EVENT_TOKENS)
					lg[i].tok += (long)ev.n_ids;
				if (ev.last)
					break;
			}
			lg[i].end_ns = pg_now_ns();
			pagoda_close(p);
			_exit(rc == 1 ? 0 : 6);
		}
	}
	close(start[0]);
	usleep(300000);	/* every process connected, waiting */
	t0 = pg_now_ns();
	close(start[1]);
	while (wait(&st) > 0)
		bad += !WIFEXITED(st) || WEXITSTATUS(st);
	if (bad)
		die("%d of %d client processes failed", bad, n);
	for (int i = 0; i < n; i++) {
		tok += lg[i].tok;
		t1 = lg[i].end_ns > t1 ? lg[i].end_ns : t1;
	}
	munmap(lg, sizeof(*lg) * MAX_REQ);
	return (double)tok / ((double)(t1 - t0) / 1e9);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "prompts", required_argument, NULL, 'p' },
		{ "n", required_argument, NULL, 'n' },
		{ "max-tokens", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .n = 16, .max_tokens = 128 };
	double conns, procs;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's': o.socket = optarg; break;
		case 'p': o.prompts = optarg; break;
		case 'n': o.n = atoi(optarg); break;
		case 't': o.max_tokens = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: serve-daemon --socket PATH --prompts FILE [--n N] [--max-tokens N]\n");
			return 2;
		}
	}
	if (!o.socket || !o.prompts || o.n < 1 || o.n > MAX_REQ || o.max_tokens < 1)
		die("--socket PATH and --prompts FILE are required; --n 1..%d; --max-tokens >= 1 (bench/serve passes them)", MAX_REQ);
	load_prompts(&o);
	run_conns(&o, o.n < 2 ? o.n : 2);	/* warm-up */
	conns = run_conns(&o, o.n);
	printf("through pagodad, %d requests at once, one process of %d connections: %.1f tokens/s\n",
	       o.n, o.n, conns);
	fflush(stdout);
	procs = run_procs(&o, o.n);
	printf("through pagodad, %d requests at once, %d processes: %.1f tokens/s\n",
	       o.n, o.n, procs);
	printf("serve-daemon: tps_conns=%.1f tps_procs=%.1f n=%d\n", conns, procs, o.n);
	for (int i = 0; i < o.n; i++)
		free(prompt[i]);
	return 0;
}
