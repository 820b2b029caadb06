# include/local.mk - libpagoda's public header, installed.
include_HEADERS += include/pagoda.h
EXTRA_DIST += include/README.md
