/*
 * ctl_top.c - `pagodactl top`: a live view of the statistics segment,
 * redrawn every interval like top(1): load, rates, KV pool, latency
 * percentiles over the last interval, devices and a per-client table
 * (for a user who may read it; a note saying who may otherwise).  What
 * the files hold is shown escaped (common/escape.h): a client's command
 * name cannot write to the terminal.
 *
 * Plain ANSI escapes (alternate screen, home, erase to end of line), so
 * it works in any terminal and over ssh; the terminal is put in
 * non-canonical mode for single keys (q quits, space redraws) and
 * restored on every exit path, SIGINT and SIGTERM included.  With --once,
 * or when standard output is not a terminal, it prints one frame.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

static volatile sig_atomic_t stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* A resize only interrupts the wait: the next frame is drawn to the new size. */
static void on_winch(int sig)
{
	(void)sig;
}

/* cur - prev, bucket by bucket (cur alone when prev is another daemon's). */
static void hist_delta(const struct pg_stats_hist *cur, const struct pg_stats_hist *prev,
		       struct pg_stats_hist *out)
{
	*out = *cur;
	if (!prev || prev->count > cur->count)
		return;
	out->count -= prev->count;
	out->sum_ns -= prev->sum_ns;
	for (int i = 0; i < PG_STATS_N_BUCKETS; i++)
		out->bucket[i] -= prev->bucket[i];
}

static int same_daemon(const struct ctl_snap *a, const struct ctl_snap *b)
{
	return a && a->h && a->h->generation == b->h->generation &&
	       a->h->reset_uptime_ns == b->h->reset_uptime_ns;
}

static void bar(FILE *f, double frac, int width)
{
	int n = (int)(frac * width + 0.5);

	fputc('[', f);
	for (int i = 0; i < width; i++)
		fputc(i < n ? '#' : '-', f);
	fputc(']', f);
}

static void frame_head(FILE *f, const struct ctl_snap *s, const struct ctl_rates *r)
{
	const struct pg_stats_header *h = s->h;
	const struct pg_stats_counters *c = &h->c;
	char up[32], clock[16], model[sizeof(h->model) * 4], arch[sizeof(h->arch) * 4 + 1],
	     isa[sizeof(h->isa) * 4 + 1];
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
	fprintf(f, "pagodad %d %s - %s (%s) - up %s - plan %ux%ux%u, %u devices, %u threads (%s) - %s\n",
		h->pid, ctl_state_name(h->state),
		ctl_shown(model, sizeof(model), h->model, sizeof(h->model)),
		ctl_shown(arch, sizeof(arch), h->arch, sizeof(h->arch)),
		ctl_fmt_dur((double)(s->read_unix_ns - h->start_unix_ns) * 1e-9, up, sizeof(up)),
		h->pp, h->tp, h->cp, h->n_devices, h->n_threads,
		ctl_shown(isa, sizeof(isa), h->isa, sizeof(h->isa)), clock);
	fprintf(f, "Requests: %llu running, %llu waiting, %llu in flight; %llu done, %llu failed, %llu cancelled, %llu refused\n",
		(unsigned long long)c->seqs_running, (unsigned long long)c->seqs_waiting,
		(unsigned long long)c->requests_inflight, (unsigned long long)c->requests_done,
		(unsigned long long)c->requests_failed, (unsigned long long)c->requests_cancelled,
		(unsigned long long)c->requests_refused);
	fprintf(f, "Rates:    %.1f generated tok/s, %.1f prompt tok/s, %.2f requests/s, %.1f steps/s (over %.1f s)\n",
		r->generated_tokens, r->prompt_tokens, r->requests, r->steps, r->interval_s);
	fprintf(f, "KV pool:  ");
	bar(f, c->kv_pages ? (double)c->kv_used / (double)c->kv_pages : 0, 30);
	fprintf(f, " %llu/%llu pages used, %llu cached, %llu free; waste %llu slots\n",
		(unsigned long long)c->kv_used, (unsigned long long)c->kv_pages,
		(unsigned long long)c->kv_cached, (unsigned long long)c->kv_free,
		(unsigned long long)c->kv_slots_waste);
	fprintf(f, "Prefix:   %.1f%% of looked-up tokens hit, %llu evictions; %llu preemptions; %llu clients\n",
		c->prefix_query_tokens ? 100.0 * (double)c->prefix_hit_tokens / (double)c->prefix_query_tokens : 0.0,
		(unsigned long long)c->prefix_evictions, (unsigned long long)c->preemptions,
		(unsigned long long)c->clients_connected);
}

static void frame_latency(FILE *f, const struct ctl_snap *s, const struct ctl_snap *prev)
{
	int recent = same_daemon(prev, s);

	static const char *const short_names[PG_STATS_N_HIST] = {
		"first token", "between tokens", "queue", "request", "step",
	};

	fprintf(f, "Latency:  p50/p99 %s:", recent ? "this interval" : "since start");
	for (int i = 0; i < PG_STATS_N_HIST; i++) {
		struct pg_stats_hist d;
		char p50[24], p99[24];

		hist_delta(&s->hist[i], recent ? &prev->hist[i] : NULL, &d);
		fprintf(f, "%s %s %s/%s", i == 3 ? "\n         " : i ? "," : "", short_names[i],
			ctl_fmt_dur(ctl_hist_quantile(s->h, &d, 0.5), p50, sizeof(p50)),
			ctl_fmt_dur(ctl_hist_quantile(s->h, &d, 0.99), p99, sizeof(p99)));
	}
	fputc('\n', f);
}

static void frame_devices(FILE *f, const struct ctl_snap *s, const struct ctl_snap *prev,
			  double dt)
{
	int recent = same_daemon(prev, s) && dt > 0;

	fprintf(f, "\n%-8s %5s %3s %3s %9s %6s %12s %12s\n", "DEVICE", "STAGE", "TP", "CP",
		"COMPUTE%", "COMM%", "SENT/s", "COLL/s");
	for (uint32_t i = 0; i < s->h->n_devices; i++) {
		const struct pg_stats_device *d = &s->dev[i], *p = recent ? &prev->dev[i] : NULL;
		double span = recent ? dt : (double)s->h->uptime_ns * 1e-9;
		char b[32], name[sizeof(d->name) * 4 + 1];

		if (span <= 0)
			span = 1;
		fprintf(f, "%-8s %5d %3d %3d %8.1f%% %5.1f%% %12s %12.1f\n",
			ctl_shown(name, sizeof(name), d->name, sizeof(d->name)), d->stage,
			d->tp_rank, d->cp_rank,
			100.0 * (double)(d->compute_ns - (p ? p->compute_ns : 0)) * 1e-9 / span,
			100.0 * (double)(d->comm_ns - (p ? p->comm_ns : 0)) * 1e-9 / span,
			ctl_fmt_bytes((double)(d->bytes_sent - (p ? p->bytes_sent : 0)) / span, b, sizeof(b)),
			(double)(d->n_all_reduce + d->n_all_gather -
				 (p ? p->n_all_reduce + p->n_all_gather : 0)) / span);
	}
}

static void frame_clients(FILE *f, const struct ctl_snap *s, const struct ctl_snap *prev,
			  double dt)
{
	int recent = same_daemon(prev, s) && dt > 0 && prev->cli && prev->n_cli == s->n_cli;

	if (!s->cli) {
		fprintf(f, "\nClients:  %s\n", s->cli_note);
		return;
	}
	fprintf(f, "\n%6s %8s %6s %-15s %8s %9s %10s %10s\n", "ID", "PID", "UID", "COMMAND",
		"INFLIGHT", "REQUESTS", "TOK/S", "GENERATED");
	for (uint32_t i = 0; i < s->n_cli; i++) {
		const struct pg_stats_client *c = &s->cli[i];
		const struct pg_stats_client *p = recent ? &prev->cli[i] : NULL;
		char comm[sizeof(c->comm) * 4 + 1];
		double rate = 0;

		if (!c->id)
			continue;
		if (p && p->id == c->id && p->pid == c->pid && p->generated_tokens <= c->generated_tokens)
			rate = (double)(c->generated_tokens - p->generated_tokens) / dt;
		ctl_shown(comm, sizeof(comm), c->comm, sizeof(c->comm));
		fprintf(f, "%6u %8d %6u %-15s %8llu %9llu %10.1f %10llu\n", c->id, c->pid, c->uid,
			comm[0] ? comm : "?", (unsigned long long)c->inflight,
			(unsigned long long)c->requests, rate,
			(unsigned long long)c->generated_tokens);
	}
}

/* One frame into a memory buffer (malloc'd, NUL-terminated). */
static char *render(const struct ctl_snap *s, const struct ctl_snap *prev, const char *note)
{
	struct ctl_rates r;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	if (s->h) {
		ctl_rates(same_daemon(prev, s) ? prev : NULL, s, &r);
		frame_head(f, s, &r);
		frame_latency(f, s, prev);
		frame_devices(f, s, prev, r.interval_s);
		frame_clients(f, s, prev, r.interval_s);
	}
	if (note)
		fprintf(f, "\n%s\n", note);
	fclose(f);
	return buf;
}

/* Draw buf from the top-left, each line cut to the width, the rest erased. */
static void draw(const char *buf, int interactive)
{
	struct winsize ws = { 0 };
	int cols = 1000, rows = 1000, row = 0;
	const char *p = buf;

	if (!interactive) {
		fputs(buf, stdout);
		return;
	}
	if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_col && ws.ws_row) {
		cols = ws.ws_col;
		rows = ws.ws_row;
	}
	fputs("\033[H", stdout);
	while (*p && row < rows - 1) {
		size_t n = strcspn(p, "\n");

		fwrite(p, 1, n < (size_t)cols ? n : (size_t)cols, stdout);
		fputs("\033[K\n", stdout);
		p += n + (p[n] == '\n');
		row++;
	}
	fputs("\033[7m q quit, space refresh \033[0m\033[K\033[J", stdout);
	fflush(stdout);
}

/* Wait up to ms for a key; 1 to quit. */
static int wait_key(int ms)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
	char ch;

	if (poll(&pfd, 1, ms) <= 0)
		return 0;
	if (read(STDIN_FILENO, &ch, 1) != 1)
		return 1;	/* the terminal went away */
	return ch == 'q' || ch == 'Q' || ch == 3 /* ^C */;
}

static void term_restore(const struct termios *saved)
{
	fputs("\033[?25h\033[?1049l", stdout);
	fflush(stdout);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, saved);
}

static int term_setup(struct termios *saved)
{
	struct termios raw;
	struct sigaction sa = { .sa_handler = on_stop };

	if (tcgetattr(STDIN_FILENO, saved))
		return -1;
	raw = *saved;
	raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw))
		return -1;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = on_winch;
	sigaction(SIGWINCH, &sa, NULL);
	fputs("\033[?1049h\033[?25l\033[2J", stdout);
	return 0;
}

/* One read: reopens the segment when a daemon (re)appeared; note on failure. */
static int read_frame(const struct ctl_opts *o, struct ctl_seg *seg, struct ctl_snap *cur,
		      char *err, size_t err_len)
{
	int rc;

	if (!seg->map) {
		rc = ctl_seg_open(o->stats_path, seg, err, err_len);
		if (rc)
			return rc;
	}
	rc = ctl_seg_read(seg, cur, err, err_len);
	if (rc)
		ctl_seg_close(seg);	/* a restarted daemon makes a new file */
	return rc;
}

static int top_once(const struct ctl_opts *o)
{
	struct ctl_seg seg = { .fd = -1, .cli_fd = -1 };
	struct ctl_snap prev = { 0 }, cur = { 0 };
	char err[512], *buf;
	int rc = read_frame(o, &seg, &cur, err, sizeof(err));

	if (!rc && o->interval_given && o->interval_s > 0) {
		struct timespec ts = { .tv_sec = (time_t)o->interval_s,
				       .tv_nsec = (long)((o->interval_s - (double)(time_t)o->interval_s) * 1e9) };

		prev = cur;
		memset(&cur, 0, sizeof(cur));
		nanosleep(&ts, NULL);
		rc = read_frame(o, &seg, &cur, err, sizeof(err));
	}
	ctl_seg_close(&seg);
	if (rc) {
		ctl_snap_free(&prev);
		fprintf(stderr, "pagodactl: %s\n", err);
		return rc;
	}
	buf = render(&cur, prev.h ? &prev : NULL, NULL);
	if (buf)
		fputs(buf, stdout);
	free(buf);
	ctl_snap_free(&prev);
	ctl_snap_free(&cur);
	return fflush(stdout) ? CTL_FAIL : CTL_OK;
}

int ctl_cmd_top(const struct ctl_opts *o)
{
	struct ctl_seg seg = { .fd = -1, .cli_fd = -1 };
	struct ctl_snap prev = { 0 }, cur = { 0 };
	struct termios saved;
	char err[512];
	int ms = (int)(o->interval_s * 1000);

	if (o->once || !isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO))
		return top_once(o);
	if (read_frame(o, &seg, &cur, err, sizeof(err))) {
		fprintf(stderr, "pagodactl: %s\n", err);
		return CTL_DOWN;
	}
	if (term_setup(&saved))
		return top_once(o);
	if (ms < 100)
		ms = 100;
	while (!stop_flag) {
		char *buf = render(&cur, prev.h ? &prev : NULL, NULL);

		if (buf)
			draw(buf, 1);
		free(buf);
		if (wait_key(ms))
			break;
		ctl_snap_free(&prev);
		prev = cur;
		memset(&cur, 0, sizeof(cur));
		while (!stop_flag && read_frame(o, &seg, &cur, err, sizeof(err))) {
			struct ctl_snap none = { 0 };

			buf = render(&none, NULL, err);
			if (buf)
				draw(buf, 1);
			free(buf);
			if (wait_key(ms))
				stop_flag = 1;
		}
	}
	term_restore(&saved);
	ctl_seg_close(&seg);
	ctl_snap_free(&prev);
	ctl_snap_free(&cur);
	return CTL_OK;
}
