/*
 * pagodactl.c - the operator's command: live statistics from pagodad's
 * read-only statistics segments (stats, top, metrics: no request to the
 * daemon), and admin commands over its admin socket (evict, drain,
 * resume, clients, loglevel, stats reset, health).
 *
 *     pagodactl [--socket P] [--stats-path P] [--admin-socket P] COMMAND ...
 *
 * This file is the command line; ctl_stats.c, ctl_metrics.c, ctl_top.c
 * and ctl_admin.c do the work.  It links libc only (wire/, common/ and
 * the default socket of include/pagoda.h are headers).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ctl/ctl.h"
#include "config.h"
#include "include/pagoda.h"
#include "wire/admin_proto.h"

static void usage(FILE *out)
{
	fprintf(out,
"Usage: pagodactl [global options] COMMAND [options] [ARGS]\n"
"\n"
"Statistics (read from pagodad's statistics file; any user who may read it;\n"
"the per-client table for root and the admin group only):\n"
"  stats [--json] [-i SEC]       every figure: requests, tokens and rates, KV pool,\n"
"                                prefix cache, devices, latency percentiles, clients;\n"
"                                rates over SEC seconds (default 1; 0: since start)\n"
"  top [--once] [-i SEC]         a live view refreshed every SEC seconds (default 1);\n"
"                                q quits; one frame with --once or without a terminal\n"
"  metrics                       the figures in Prometheus text format\n"
"\n"
"Admin commands (root or pagodad's admin group only):\n"
"  evict all | age SECONDS | pages N | client ID | prefix TEXT\n"
"                                drop cached KV pages; says how many went\n"
"  drain [--wait] [--timeout SEC]   refuse new requests, let running ones finish;\n"
"                                --wait answers once the engine is idle\n"
"  resume                        admit requests again\n"
"  clients [disconnect ID]       list the connected clients, or disconnect one\n"
"  loglevel error|warn|info|debug   the daemon's log level\n"
"  stats reset                   zero the counters and histograms\n"
"  health                        exit 0 when healthy, 1 with the reason otherwise\n"
"\n"
"Global options:\n"
"  -s, --socket PATH       pagodad's client socket; the two paths below default to\n"
"                          files beside it (default $PAGODA_SOCKET, else\n"
"                          " PAGODA_DEFAULT_SOCKET ")\n"
"      --stats-path PATH   the statistics file (default NAME.stats beside it)\n"
"      --admin-socket PATH the admin socket (default NAME-admin.sock beside it)\n"
"  -j, --json              JSON output (stats and admin commands)\n"
"  -h, --help              this text\n"
"      --version           the version\n"
"\n"
"Exit status: 0 success (health: healthy), 1 refused, failed or unhealthy,\n"
"2 usage error, 3 pagodad is not running, 4 permission denied.  See pagodactl(8).\n");
}

static int usage_error(const char *fmt, const char *arg)
{
	fputs("pagodactl: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\nTry 'pagodactl --help' for more information.\n", stderr);
	return CTL_USAGE;
}

static int parse_seconds(const char *opt, const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v > 1e9)
		return usage_error("%s: expected a number of seconds", opt);
	*out = v;
	return 0;
}

static int parse_u64(const char *what, const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-')
		return usage_error("%s: expected a whole number", what);
	*out = v;
	return 0;
}

/*
 * The command's own options, anywhere after it: -j/--json, -i/--interval,
 * --once, --wait, --timeout; the rest stay in args[0 .. *n_args).
 */
static int command_opts(int argc, char **argv, struct ctl_opts *o, char **args,
			int *n_args)
{
	*n_args = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-j") || !strcmp(a, "--json")) {
			o->json = 1;
		} else if (!strcmp(a, "--once")) {
			o->once = 1;
		} else if (!strcmp(a, "--wait")) {
			o->wait = 1;
		} else if (!strcmp(a, "-i") || !strcmp(a, "--interval") || !strcmp(a, "--timeout")) {
			if (i + 1 >= argc)
				return usage_error("%s needs a number of seconds", a);
			if (parse_seconds(a, argv[++i], strcmp(a, "--timeout") ? &o->interval_s : &o->timeout_s))
				return CTL_USAGE;
			o->interval_given |= !!strcmp(a, "--timeout");
		} else if (a[0] == '-' && a[1] && strcmp(a, "--")) {
			return usage_error("unknown option '%s'", a);
		} else {
			args[(*n_args)++] = argv[i];
		}
	}
	return 0;
}

static int want_args(const char *cmd, int n, int lo, int hi)
{
	if (n < lo)
		return usage_error("%s: an argument is missing", cmd);
	if (n > hi)
		return usage_error("%s: too many arguments", cmd);
	return 0;
}

static int cmd_evict(const struct ctl_opts *o, char **args, int n)
{
	static const char *const kinds[] = { "all", "age", "pages", "client", "prefix" };
	struct pg_admin_request q = { .cmd = PG_ADMIN_EVICT };
	uint32_t k;

	if (!n)
		return usage_error("evict: give all, age SECONDS, pages N, client ID or prefix TEXT%s", "");
	for (k = 0; k < 5 && strcmp(args[0], kinds[k]); k++)
		;
	if (k == 5)
		return usage_error("evict: unknown kind '%s' (all, age, pages, client or prefix)", args[0]);
	if (want_args("evict", n, k ? 2 : 1, k ? 2 : 1))
		return CTL_USAGE;
	q.evict_by = k;
	if (k == PG_ADMIN_EVICT_AGE && parse_seconds("evict age", args[1], &q.seconds))
		return CTL_USAGE;
	if ((k == PG_ADMIN_EVICT_PAGES || k == PG_ADMIN_EVICT_CLIENT) &&
	    parse_u64(kinds[k], args[1], &q.arg))
		return CTL_USAGE;
	if (k == PG_ADMIN_EVICT_PREFIX) {
		size_t len = strlen(args[1]);

		if (!len || len >= PG_ADMIN_TEXT)
			return usage_error("evict prefix: give 1 to %s bytes of text", "4051");
		memcpy(q.text, args[1], len);
		q.text_len = (uint32_t)len;
	}
	return ctl_admin(o, &q);
}

static int cmd_simple(const struct ctl_opts *o, uint32_t cmd, uint32_t flags)
{
	struct pg_admin_request q = { .cmd = cmd, .flags = flags };

	return ctl_admin(o, &q);
}

static int cmd_clients(const struct ctl_opts *o, char **args, int n)
{
	struct pg_admin_request q = { .cmd = PG_ADMIN_CLIENTS };

	if (!n)
		return ctl_admin(o, &q);
	if (strcmp(args[0], "disconnect"))
		return usage_error("clients: unknown argument '%s' (clients, or clients disconnect ID)", args[0]);
	if (want_args("clients disconnect", n - 1, 1, 1) ||
	    parse_u64("clients disconnect", args[1], &q.arg))
		return CTL_USAGE;
	q.cmd = PG_ADMIN_DISCONNECT;
	return ctl_admin(o, &q);
}

static int cmd_loglevel(const struct ctl_opts *o, char **args, int n)
{
	struct pg_admin_request q = { .cmd = PG_ADMIN_LOGLEVEL };

	if (want_args("loglevel", n, 1, 1))
		return CTL_USAGE;
	snprintf(q.text, sizeof(q.text), "%s", args[0]);
	q.text_len = (uint32_t)strlen(q.text);
	return ctl_admin(o, &q);
}

static int dispatch(const char *cmd, struct ctl_opts *o, char **args, int n)
{
	if (!strcmp(cmd, "stats")) {
		if (n == 1 && !strcmp(args[0], "reset"))
			return cmd_simple(o, PG_ADMIN_STATS_RESET, 0);
		return want_args("stats", n, 0, 0) ? CTL_USAGE : ctl_cmd_stats(o);
	}
	if (!strcmp(cmd, "top"))
		return want_args(cmd, n, 0, 0) ? CTL_USAGE : ctl_cmd_top(o);
	if (!strcmp(cmd, "metrics"))
		return want_args(cmd, n, 0, 0) ? CTL_USAGE : ctl_cmd_metrics(o);
	if (!strcmp(cmd, "evict"))
		return cmd_evict(o, args, n);
	if (!strcmp(cmd, "drain"))
		return want_args(cmd, n, 0, 0) ? CTL_USAGE
		       : cmd_simple(o, PG_ADMIN_DRAIN, o->wait ? PG_ADMIN_F_WAIT : 0);
	if (!strcmp(cmd, "resume"))
		return want_args(cmd, n, 0, 0) ? CTL_USAGE : cmd_simple(o, PG_ADMIN_RESUME, 0);
	if (!strcmp(cmd, "clients"))
		return cmd_clients(o, args, n);
	if (!strcmp(cmd, "loglevel"))
		return cmd_loglevel(o, args, n);
	if (!strcmp(cmd, "health"))
		return want_args(cmd, n, 0, 0) ? CTL_USAGE : cmd_simple(o, PG_ADMIN_HEALTH, 0);
	return usage_error("unknown command '%s': stats, top, metrics, evict, drain, resume, clients, loglevel or health",
			   cmd);
}

enum { OPT_STATS_PATH = 256, OPT_ADMIN_SOCKET, OPT_VERSION };

static const struct option long_opts[] = {
	{ "socket", required_argument, NULL, 's' },
	{ "stats-path", required_argument, NULL, OPT_STATS_PATH },
	{ "admin-socket", required_argument, NULL, OPT_ADMIN_SOCKET },
	{ "json", no_argument, NULL, 'j' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

int main(int argc, char **argv)
{
	static char stats_buf[PATH_MAX], admin_buf[PATH_MAX];
	struct ctl_opts o = { .interval_s = 1.0 };
	const char *sock = getenv("PAGODA_SOCKET");
	char **args;
	int c, n, rc;

	if (!sock || !*sock)
		sock = PAGODA_DEFAULT_SOCKET;
	while ((c = getopt_long(argc, argv, "+s:jh", long_opts, NULL)) != -1) {
		switch (c) {
		case 's': sock = optarg; break;
		case OPT_STATS_PATH: o.stats_path = optarg; break;
		case OPT_ADMIN_SOCKET: o.admin_socket = optarg; break;
		case 'j': o.json = 1; break;
		case 'h': usage(stdout); return CTL_OK;
		case OPT_VERSION: printf("pagodactl %s\n", PACKAGE_VERSION); return CTL_OK;
		default: fputs("Try 'pagodactl --help' for more information.\n", stderr); return CTL_USAGE;
		}
	}
	if (optind >= argc)
		return usage_error("give a command: stats, top, metrics, evict, drain, resume, clients, loglevel or health%s", "");
	if ((!o.stats_path && pg_stats_path_beside(sock, ".stats", stats_buf, sizeof(stats_buf))) ||
	    (!o.admin_socket && pg_stats_path_beside(sock, "-admin.sock", admin_buf, sizeof(admin_buf))))
		return usage_error("--socket %s: the path is too long", sock);
	if (!o.stats_path)
		o.stats_path = stats_buf;
	if (!o.admin_socket)
		o.admin_socket = admin_buf;
	args = calloc((size_t)argc, sizeof(*args));
	if (!args)
		return CTL_FAIL;
	rc = command_opts(argc - optind - 1, argv + optind + 1, &o, args, &n);
	if (!rc)
		rc = dispatch(argv[optind], &o, args, n);
	free(args);
	return rc;
}
