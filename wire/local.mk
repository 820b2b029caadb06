# wire/local.mk - what two processes agree on: the client protocol, the
# admin protocol and the statistics segment's layout (headers only).
noinst_HEADERS += \
	wire/admin_proto.h \
	wire/client_proto.h \
	wire/stats_layout.h
EXTRA_DIST += wire/README.md
