/*
 * test_gguf_oracle.c - our GGUF container against llama.cpp's own reader
 * (libggml-base's gguf_init_from_file, from the oracle that
 * tools/install-oracle.sh installs) on the same files: synthetic models of
 * both tiny presets in every tensor type ignis-mkmodel writes. Both readers
 * must see the same version, alignment and data offset, the same keys in
 * the same order with the same types and values, and the same tensors with
 * the same names, dims, types, offsets and byte counts; our tensor data
 * pointer must be where ggml's offsets say. Without the oracle
 * ($IGNIS_ORACLE_LIB_DIR) the comparisons are skipped and the program exits
 * 77, meson's skip.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/gguf.h"
#include "model/mfile.h"

/* The part of ggml's gguf.h we call (llama.cpp as the pinned package ships
 * it): a parameter pair, an opaque context, plain getters. */
struct gg_init_params {
	bool no_alloc;
	void **ctx;
};

static struct {
	void *lib;
	void *(*init)(const char *fname, struct gg_init_params params);
	void (*free)(void *ctx);
	uint32_t (*version)(const void *ctx);
	size_t (*alignment)(const void *ctx);
	size_t (*data_offset)(const void *ctx);
	int64_t (*n_kv)(const void *ctx);
	const char *(*key)(const void *ctx, int64_t id);
	int (*kv_type)(const void *ctx, int64_t id);
	int (*arr_type)(const void *ctx, int64_t id);
	uint32_t (*u32)(const void *ctx, int64_t id);
	uint64_t (*u64)(const void *ctx, int64_t id);
	float (*f32)(const void *ctx, int64_t id);
	const char *(*str)(const void *ctx, int64_t id);
	size_t (*arr_n)(const void *ctx, int64_t id);
	int64_t (*n_tensors)(const void *ctx);
	const char *(*t_name)(const void *ctx, int64_t id);
	size_t (*t_offset)(const void *ctx, int64_t id);
	const int64_t *(*t_ne)(const void *ctx, int64_t id);
	int (*t_type)(const void *ctx, int64_t id);
	size_t (*t_size)(const void *ctx, int64_t id);
} gg;

static char dir[] = "/tmp/test-gguf-oracle.XXXXXX";

static void *sym(const char *name)
{
	void *p = dlsym(gg.lib, name);

	if (!p)
		fail_msg("libggml-base has no %s", name);
	return p;
}

#define SYM(field, name) (*(void **)&gg.field = sym(name))

static int setup(void **state)
{
	const char *d = getenv("IGNIS_ORACLE_LIB_DIR");
	char path[4096];

	(void)state;
	if (!mkdtemp(dir))
		return -1;
	if (!d || !*d)
		return 0;
	snprintf(path, sizeof(path), "%s/libggml-base.so", d);
	/* not installed (no file there): skipped, as llama_oracle.h's llo_open */
	if (access(path, R_OK))
		return 0;
	gg.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!gg.lib) {
		print_error("cannot load the oracle %s: %s\n", path, dlerror());
		return -1;
	}
	SYM(init, "gguf_init_from_file");
	SYM(free, "gguf_free");
	SYM(version, "gguf_get_version");
	SYM(alignment, "gguf_get_alignment");
	SYM(data_offset, "gguf_get_data_offset");
	SYM(n_kv, "gguf_get_n_kv");
	SYM(key, "gguf_get_key");
	SYM(kv_type, "gguf_get_kv_type");
	SYM(arr_type, "gguf_get_arr_type");
	SYM(u32, "gguf_get_val_u32");
	SYM(u64, "gguf_get_val_u64");
	SYM(f32, "gguf_get_val_f32");
	SYM(str, "gguf_get_val_str");
	SYM(arr_n, "gguf_get_arr_n");
	SYM(n_tensors, "gguf_get_n_tensors");
	SYM(t_name, "gguf_get_tensor_name");
	SYM(t_offset, "gguf_get_tensor_offset");
	SYM(t_ne, "gguf_get_tensor_ne");
	SYM(t_type, "gguf_get_tensor_type");
	SYM(t_size, "gguf_get_tensor_size");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rmdir(dir);
	return 0;
}

/* Both readers on `path`, field by field. */
static void compare(const char *path, const char *what)
{
	struct gguf g;
	struct ig_errbuf eb;
	void *c;

	if (gguf_open(&g, path, &eb))
		fail_msg("%s: ours refused it: %s", what, eb.msg);
	c = gg.init(path, (struct gg_init_params){.no_alloc = true, .ctx = NULL});
	if (!c)
		fail_msg("%s: llama.cpp's reader refused it", what);
	assert_int_equal(gg.version(c), g.version);
	assert_int_equal(gg.alignment(c), g.alignment);
	assert_int_equal(gg.data_offset(c), g.data_offset);
	assert_int_equal(gg.n_kv(c), g.n_kv);
	for (size_t i = 0; i < g.n_kv; i++) {
		const struct gguf_kv *kv = &g.kvs[i];

		assert_string_equal(gg.key(c, (int64_t)i), kv->key);
		assert_int_equal(gg.kv_type(c, (int64_t)i), kv->type);
		switch (kv->type) {
		case GGUF_TYPE_UINT32:
			assert_int_equal(gg.u32(c, (int64_t)i), kv->v.u32);
			break;
		case GGUF_TYPE_UINT64:
			assert_int_equal(gg.u64(c, (int64_t)i), kv->v.u64);
			break;
		case GGUF_TYPE_FLOAT32: {
			float a = gg.f32(c, (int64_t)i);

			assert_memory_equal(&a, &kv->v.f32, sizeof(a));
			break;
		}
		case GGUF_TYPE_STRING:
			assert_int_equal(strlen(gg.str(c, (int64_t)i)), kv->v.str.len);
			assert_memory_equal(gg.str(c, (int64_t)i), kv->v.str.ptr, kv->v.str.len);
			break;
		case GGUF_TYPE_ARRAY:
			assert_int_equal(gg.arr_type(c, (int64_t)i), kv->v.arr.type);
			assert_int_equal(gg.arr_n(c, (int64_t)i), kv->v.arr.n);
			break;
		default:
			break;
		}
	}
	assert_int_equal(gg.n_tensors(c), g.n_tensors);
	for (size_t i = 0; i < g.n_tensors; i++) {
		const struct gguf_tensor *t = &g.tensors[i];
		const int64_t *ne = gg.t_ne(c, (int64_t)i);

		assert_string_equal(gg.t_name(c, (int64_t)i), t->name);
		assert_int_equal(gg.t_type(c, (int64_t)i), t->type);
		for (unsigned d = 0; d < GGUF_MAX_DIMS; d++)
			assert_int_equal(ne[d], t->dims[d]);
		assert_int_equal(gg.t_offset(c, (int64_t)i), t->offset);
		if (gg.t_size(c, (int64_t)i) != t->n_bytes)
			fail_msg("%s: tensor %s: llama.cpp counts %zu bytes, we %llu", what, t->name,
			         gg.t_size(c, (int64_t)i), (unsigned long long)t->n_bytes);
		assert_ptr_equal((const unsigned char *)t->data,
		                 g.base + g.data_offset + gg.t_offset(c, (int64_t)i));
	}
	gg.free(c);
	gguf_close(&g);
}

static void test_synthetic_models(void **state)
{
	static const struct {
		const char *preset;
		enum mfile_dtype dt;
	} rows[] = {
	    {"tiny-dense", MFILE_BF16}, {"tiny-dense", MFILE_F16},  {"tiny-dense", MFILE_F32},
	    {"tiny-dense", MFILE_Q8_0}, {"tiny-dense", MFILE_Q4_0}, {"tiny-dense", MFILE_Q4_K},
	    {"tiny-dense", MFILE_Q5_K}, {"tiny-dense", MFILE_Q6_K}, {"tiny-moe", MFILE_BF16},
	    {"tiny-moe", MFILE_Q4_K},   {"tiny-moe", MFILE_Q6_K},
	};

	(void)state;
	if (!gg.lib) {
		print_message("the oracle is not installed (IGNIS_ORACLE_LIB_DIR; "
		              "tools/install-oracle.sh): skipped\n");
		skip();
	}
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct ig_errbuf eb;
		char path[256], what[64];

		snprintf(path, sizeof(path), "%s/m.gguf", dir);
		snprintf(what, sizeof(what), "%s at type %d", rows[i].preset, (int)rows[i].dt);
		if (mfile_write_synthetic(mdesc_find(rows[i].preset), 3, rows[i].dt, path, &eb))
			fail_msg("%s: %s", what, eb.msg);
		compare(path, what);
		unlink(path);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_synthetic_models)};
	int failed = cmocka_run_group_tests(tests, setup, teardown);

	return failed ? failed : gg.lib ? 0 : 77;
}
