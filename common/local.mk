# common/local.mk - header-only helpers any folder may include (they know
# no module).
noinst_HEADERS += \
	common/clock.h \
	common/escape.h \
	common/spin.h
