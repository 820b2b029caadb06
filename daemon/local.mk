# daemon/local.mk - pagodad.  Everything lives in libpagodad, which the
# in-process tests link too (tests/local.mk); pagodad itself is main.c and
# the allocation wrappers.  libpagodad holds the command line (pagodad.c)
# and the modes that need no running daemon (oneshot.c); the loop, the
# sockets and the handshake (loop.c, listen.c, server.c), client segments
# and completions (session.c), requests and engine events (request.c), the
# tokenizing worker threads (tokwork.c), the access rules (access.c); the
# admin socket and the statistics segment (admin.c, stats.c; their layouts
# in wire/); pagodad.conf and the options over it (config.c, settings.c),
# SIGHUP's reload (reload.c); JSON Schemas into grammars (schema.c, on
# jansson); sd_notify without libsystemd (notify.c) and
# the log (log.c).
noinst_LTLIBRARIES += daemon/libpagodad.la
daemon_libpagodad_la_SOURCES = \
	common/escape.h \
	daemon/access.c \
	daemon/access.h \
	daemon/admin.c \
	daemon/admin.h \
	daemon/config.c \
	daemon/config.h \
	daemon/control.c \
	daemon/control.h \
	daemon/daemon.h \
	daemon/listen.c \
	daemon/listen.h \
	daemon/log.c \
	daemon/log.h \
	daemon/loop.c \
	daemon/loop.h \
	daemon/notify.c \
	daemon/notify.h \
	daemon/oneshot.c \
	daemon/oneshot.h \
	daemon/pagodad.c \
	daemon/pagodad.h \
	daemon/reload.c \
	daemon/request.c \
	daemon/schema.c \
	daemon/schema.h \
	daemon/server.c \
	daemon/server.h \
	daemon/session.c \
	daemon/settings.c \
	daemon/settings.h \
	daemon/stats.c \
	daemon/stats.h \
	daemon/tokwork.c \
	wire/admin_proto.h \
	wire/stats_layout.h
daemon_libpagodad_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) $(INIH_CFLAGS) $(JANSSON_CFLAGS)
daemon_libpagodad_la_LIBADD = daemon/engine/libpgengine.la $(URING_LIBS) $(INIH_LIBS) $(JANSSON_LIBS)

sbin_PROGRAMS += daemon/pagodad
daemon_pagodad_SOURCES = \
	daemon/fault_wrap.c \
	daemon/main.c
daemon_pagodad_CPPFLAGS = $(AM_CPPFLAGS)
daemon_pagodad_LDADD = daemon/libpagodad.la
# every allocation of pagodad's own code goes through daemon/fault_wrap.c,
# so that tests/test-faults.sh can fail the Nth (daemon/engine/fault.h)
daemon_pagodad_LDFLAGS = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup
