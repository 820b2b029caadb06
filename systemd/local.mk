# systemd/local.mk - the units (pagodad's; pagoda-http's, installed
# only where it is built), filled in from its template with the
# configured sbindir, and the sysusers.d and tmpfiles.d entries, each
# installed only where configure knows the directory (systemd.pc, or
# --with-systemdsystemunitdir=DIR and the like); distcheck installs them
# under its own prefix.  sd_notify itself is daemon/notify.c (no
# libsystemd); pagodad.conf.example is a complete configuration.
noinst_DATA += \
	systemd/pagodad.service \
	systemd/pagoda-http.service \
	systemd/sysusers.d/pagoda.conf \
	systemd/tmpfiles.d/pagoda.conf
if HAVE_SYSTEMDSYSTEMUNITDIR
systemdsystemunit_DATA = systemd/pagodad.service
if HAVE_HTTP
systemdsystemunit_DATA += systemd/pagoda-http.service
endif
endif
if HAVE_SYSUSERSDIR
sysusers_DATA = systemd/sysusers.d/pagoda.conf
endif
if HAVE_TMPFILESDIR
tmpfiles_DATA = systemd/tmpfiles.d/pagoda.conf
endif
MOSTLYCLEANFILES += $(noinst_DATA)
AM_DISTCHECK_CONFIGURE_FLAGS = \
	--with-systemdsystemunitdir='$$(prefix)/lib/systemd/system' \
	--with-sysusersdir='$$(prefix)/lib/sysusers.d' \
	--with-tmpfilesdir='$$(prefix)/lib/tmpfiles.d'

systemd/pagodad.service: $(srcdir)/systemd/pagodad.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && \
	sed -e 's|@sbindir[@]|$(sbindir)|g' $(srcdir)/systemd/pagodad.service.in >$@.tmp && \
	mv $@.tmp $@
systemd/pagoda-http.service: $(srcdir)/systemd/pagoda-http.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && \
	sed -e 's|@sbindir[@]|$(sbindir)|g' $(srcdir)/systemd/pagoda-http.service.in >$@.tmp && \
	mv $@.tmp $@
systemd/sysusers.d/pagoda.conf: $(srcdir)/systemd/pagoda.sysusers
	$(AM_V_GEN)$(MKDIR_P) systemd/sysusers.d && cp $(srcdir)/systemd/pagoda.sysusers $@
systemd/tmpfiles.d/pagoda.conf: $(srcdir)/systemd/pagoda.tmpfiles
	$(AM_V_GEN)$(MKDIR_P) systemd/tmpfiles.d && cp $(srcdir)/systemd/pagoda.tmpfiles $@

EXTRA_DIST += \
	systemd/README.md \
	systemd/pagoda.sysusers \
	systemd/pagoda.tmpfiles \
	systemd/pagodad.conf.example \
	systemd/pagoda-http.service.in \
	systemd/pagodad.service.in
