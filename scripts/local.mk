# scripts/local.mk - what a clean machine needs beside the build: the
# dependencies, the models and vocabularies, the test driver (.ci/run runs
# it), the quick start, and the K-quant copies of the default model.
EXTRA_DIST += \
	scripts/fetch-model \
	scripts/fetch-vocabs \
	scripts/install-deps \
	scripts/quickstart \
	scripts/requantize \
	scripts/test
