# man/local.mk - the man pages: the programs (pagoda.1, pagoda-http.8,
# pagodactl.8, pagodad.8), the configuration file (pagoda.conf.5), the Python binding
# (pagoda-python.7), the grammar and JSON Schema formats (pagoda-grammar.7,
# pagoda-json-schema.7), and libpagoda(3), the overview, with a page for each
# public function (tests/test-man.sh checks that every function of
# include/pagoda.h has one, listed here).
dist_man_MANS += \
	man/libpagoda.3 \
	man/pagoda.1 \
	man/pagoda-grammar.7 \
	man/pagoda-http.8 \
	man/pagoda-json-schema.7 \
	man/pagoda-python.7 \
	man/pagoda.conf.5 \
	man/pagoda_cancel.3 \
	man/pagoda_chat_info.3 \
	man/pagoda_close.3 \
	man/pagoda_completion_free.3 \
	man/pagoda_connect.3 \
	man/pagoda_detokenize.3 \
	man/pagoda_fd.3 \
	man/pagoda_finish_name.3 \
	man/pagoda_generate.3 \
	man/pagoda_last_error.3 \
	man/pagoda_model_info.3 \
	man/pagoda_next_event.3 \
	man/pagoda_ping.3 \
	man/pagoda_request_init.3 \
	man/pagoda_set_spin_us.3 \
	man/pagoda_strerror.3 \
	man/pagoda_submit.3 \
	man/pagoda_tokenize.3 \
	man/pagodactl.8 \
	man/pagodad.8
