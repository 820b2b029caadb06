# http/local.mk - pagoda-http, the OpenAI-compatible HTTP gateway: a client
# of pagodad through libpagoda (the daemon stays free of HTTP and JSON),
# on libmicrohttpd and jansson.  Built only when configure found both
# (HAVE_HTTP); its page is man/pagoda-http.8, its unit
# systemd/pagoda-http.service, its test tests/test-http.sh.
if HAVE_HTTP
sbin_PROGRAMS += http/pagoda-http
endif
http_pagoda_http_SOURCES = \
	http/api.c \
	http/buf.c \
	http/http.h \
	http/server.c \
	http/tools.c \
	daemon/schema.c \
	daemon/schema.h \
	client/ctl/ctl.h \
	client/ctl/ctl_metrics.c \
	client/ctl/ctl_stats.c \
	common/escape.h \
	include/pagoda.h \
	wire/stats_layout.h
http_pagoda_http_CPPFLAGS = $(AM_CPPFLAGS) $(MHD_CFLAGS) $(JANSSON_CFLAGS)
http_pagoda_http_LDADD = client/libpagoda.la $(MHD_LIBS) $(JANSSON_LIBS) -lm -lpthread
