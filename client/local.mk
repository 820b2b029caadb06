# client/local.mk - the client side: libpagoda (client/lib/), the pagoda
# command (client/cli/) and pagodactl (client/ctl/); the built files keep
# their places in client/.  Their man pages are in man/local.mk, pagoda.pc
# in the top Makefile.am.

# libpagoda: the client library, installed with its header and pagoda.pc.
# It depends on wire/, shm/ and libc only (never the engine) and exports
# only pagoda_* symbols.
lib_LTLIBRARIES += client/libpagoda.la
client_libpagoda_la_SOURCES = \
	client/lib/event.c \
	client/lib/internal.h \
	client/lib/io.c \
	client/lib/libpagoda.c \
	client/lib/ops.c \
	client/lib/request.c \
	include/pagoda.h \
	shm/ring.h \
	shm/segment.h \
	wire/client_proto.h
# -version-info current:revision:age (libtool's rules, not the release).
# 1: struct pagoda_figures grew (seed), so pagoda_sample and pagoda_event
# changed layout (and grew token_logprobs, logprob): not compatible with 0.
# 2: pagoda_chat_info and PAGODA_ROLE_TOOL added, nothing changed: age 1.
client_libpagoda_la_LDFLAGS = -version-info 2:0:1 -export-symbols-regex '^pagoda_'
client_libpagoda_la_LIBADD = -lpthread

# pagoda: the command line over libpagoda.
bin_PROGRAMS += client/pagoda
client_pagoda_SOURCES = \
	client/cli/cli.h \
	client/cli/cli_out.c \
	client/cli/pagoda.c
client_pagoda_LDADD = client/libpagoda.la

# pagodactl reads the daemon's statistics segment and speaks its admin
# socket (wire/stats_layout.h, wire/admin_proto.h); it links libc only.
sbin_PROGRAMS += client/pagodactl
client_pagodactl_SOURCES = \
	client/ctl/ctl.h \
	client/ctl/ctl_admin.c \
	client/ctl/ctl_metrics.c \
	client/ctl/ctl_stats.c \
	client/ctl/ctl_top.c \
	client/ctl/pagodactl.c \
	common/escape.h \
	include/pagoda.h \
	wire/admin_proto.h \
	wire/stats_layout.h

# The example of libpagoda(3), built as a user would: the public header
# alone, strict C99, linked with the library.
check_PROGRAMS += client/example
client_example_SOURCES = client/example.c
client_example_CPPFLAGS = -I$(top_srcdir)/include
client_example_CFLAGS = -std=c99 -pedantic -Wall -Wextra $(SAN_CFLAGS)
client_example_LDADD = client/libpagoda.la

EXTRA_DIST += client/README.md
