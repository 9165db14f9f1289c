/*
 * gguf.h - the GGUF v3 container: a strict reader over a read-only mapping and
 * an atomic writer whose memory use does not depend on the file's size.
 *
 * The gpu-worker's model loader reads weights and hyper-parameters with
 * gguf_open(); ignis-mkmodel writes synthetic models with struct gguf_writer,
 * tensor data produced chunk by chunk by a callback (gguf_writer_add_tensor_fill),
 * so that a model of tens of GB is written through one buffer of a few MiB.
 * Only what Ignis serves is accepted: GGUF version 3, tensors of the types
 * model/quant.h reads, at most 4 dimensions. Everything is parsed and checked
 * when the file is opened, so a struct gguf that opened is consistent: every
 * string, array and tensor lies inside the file, keys and tensor names are
 * unique valid UTF-8, tensors are aligned and do not overlap.
 *
 * On disk (little-endian throughout; a gguf string is a uint64 byte length
 * followed by that many bytes, no NUL):
 *
 *   | field        | type                 | notes                                  |
 *   |--------------|----------------------|----------------------------------------|
 *   | magic        | 4 bytes              | "GGUF"                                 |
 *   | version      | uint32               | 3                                      |
 *   | tensor_count | uint64               |                                        |
 *   | kv_count     | uint64               |                                        |
 *   | kv pairs     | kv_count x           | key (gguf string), uint32 value type,  |
 *   |              |                      | value (see enum gguf_type)             |
 *   | tensor infos | tensor_count x       | name (gguf string), uint32 n_dims,     |
 *   |              |                      | uint64 dims[n_dims] (dims[0] fastest), |
 *   |              |                      | uint32 ggml type, uint64 offset        |
 *   | padding      | to the alignment     | general.alignment (UINT32), default 32 |
 *   | data section | tensor bytes         | offsets relative to its start          |
 *
 * An ARRAY value is a uint32 element type, a uint64 count, then the elements
 * (scalars back to back, strings as gguf strings). Arrays of arrays are
 * refused. A BOOL is one byte, 0 or 1 (anything else is refused). The
 * counts (pairs, tensor infos, array elements) are bounded by the file's
 * size and by GGUF_MAX_* below.
 *
 * Errors: IG_E_IO when the file cannot be opened, read, mapped or written,
 * IG_E_INVAL for content that is not an accepted GGUF file (a truncated file
 * included: its message says "truncated"), IG_E_NOMEM, and IG_E_NOTFOUND from
 * the getters for a missing key. Every message names the file, what was wrong
 * and what is accepted.
 *
 * This host must be little-endian (gguf.c refuses to build otherwise).
 */
#ifndef IGNIS_GPU_WORKER_GGUF_H
#define IGNIS_GPU_WORKER_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

#define GGUF_VERSION           3u
#define GGUF_MAX_DIMS          4u
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_KEY_ALIGNMENT     "general.alignment"

/*
 * The most of each count a file states that the reader accepts. Each count
 * is checked first against what the file's size can hold (a count past it
 * is "truncated"), then against these, before anything is read or
 * allocated for it: the tables the reader builds stay a small multiple of
 * these, whatever the header says.
 *   GGUF_MAX_KV      pairs: llama.cpp's converters write about 40 and a
 *                    file of every tokenizer and chat key under 100; 2^16 is
 *                    hundreds of times that (3.5 MiB of pair table).
 *   GGUF_MAX_TENSORS tensor infos: a file stores each expert's projections
 *                    as one tensor a layer (Flash-Next's 843 tensors); one
 *                    tensor an expert would be 512 experts x 3 x 96 layers =
 *                    147,456; 2^20 is seven times that (88 MiB of table).
 *   GGUF_MAX_ARRAY   elements of one array: the longest a model file
 *                    carries are its vocabulary's (tokens, types, scores:
 *                    262,144 for Gemma 3, 151,936 for Qwen3) and its merges
 *                    (Llama 3's 280,147); 2^22 is fifteen times those (a
 *                    string array's views take 64 MiB at most).
 */
#define GGUF_MAX_KV      (1u << 16)
#define GGUF_MAX_TENSORS (1u << 20)
#define GGUF_MAX_ARRAY   (1u << 22)

/* KV value types. On disk: never renumber. */
enum gguf_type {
	GGUF_TYPE_UINT8 = 0,
	GGUF_TYPE_INT8 = 1,
	GGUF_TYPE_UINT16 = 2,
	GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4,
	GGUF_TYPE_INT32 = 5,
	GGUF_TYPE_FLOAT32 = 6,
	GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8,
	GGUF_TYPE_ARRAY = 9,
	GGUF_TYPE_UINT64 = 10,
	GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
};
#define GGUF_TYPE_COUNT 13u

/* ggml tensor types by ggml's numbers (never renumber). The container reads
 * every type model/quant.h reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K: rows of whole blocks) and refuses the others by name; what a model
 * runs is the model's loader to say. */
enum gguf_tensor_type {
	GGUF_TENSOR_F32 = 0,
	GGUF_TENSOR_F16 = 1,
	GGUF_TENSOR_Q4_0 = 2,
	GGUF_TENSOR_Q8_0 = 8,
	GGUF_TENSOR_Q4_K = 12,
	GGUF_TENSOR_Q5_K = 13,
	GGUF_TENSOR_Q6_K = 14,
	GGUF_TENSOR_BF16 = 30,
};

/* A byte string: NOT NUL-terminated. Where it points is said at each use. */
struct gguf_str {
	const char *ptr;
	size_t len;
};

/*
 * An array value. `data` points at the raw little-endian elements inside the
 * file image: they may be unaligned, read them with memcpy. For arrays of
 * STRING `data` points at the first length field and `strs` holds the `n`
 * strings (views into the file image); for other arrays `strs` is NULL.
 */
struct gguf_arr {
	enum gguf_type type; /* element type, never ARRAY */
	uint64_t n;
	const void *data;
	const struct gguf_str *strs;
};

/*
 * One key-value pair. `key` is NUL-terminated, valid UTF-8, non-empty,
 * without NUL; it and `v.arr.strs` belong to the struct gguf. String values
 * (`v.str`, `v.arr.strs[i]`) are views into the file image, bytes as stored:
 * GGUF says UTF-8, but values are not checked (a byte-level vocabulary holds
 * single bytes that are not UTF-8 on their own).
 */
struct gguf_kv {
	const char *key;
	size_t key_len;
	enum gguf_type type;
	union gguf_value {
		uint8_t u8;
		int8_t i8;
		uint16_t u16;
		int16_t i16;
		uint32_t u32;
		int32_t i32;
		float f32;
		bool b;
		uint64_t u64;
		int64_t i64;
		double f64;
		struct gguf_str str;
		struct gguf_arr arr;
	} v;
};

/*
 * One tensor. `name` (NUL-terminated, valid UTF-8, non-empty) belongs to the
 * struct gguf; `data` points into the file image, `n_bytes` long, aligned to
 * the file's alignment relative to the start of the image (gguf_open's
 * mapping is page-aligned, so the address itself is aligned for alignments up
 * to the page size). dims[i] >= 1 for
 * i < n_dims and dims[i] == 1 above; n_elements and n_bytes are at most
 * INT64_MAX.
 */
struct gguf_tensor {
	const char *name;
	size_t name_len;
	enum gguf_tensor_type type;
	uint32_t n_dims;
	uint64_t dims[GGUF_MAX_DIMS];
	uint64_t n_elements;
	uint64_t n_bytes;
	uint64_t offset; /* relative to the data section */
	const void *data;
};

/*
 * An open GGUF file. The caller embeds it; all fields are read-only for the
 * caller. Every pointer handed out by the functions below (kv, tensor, key,
 * name, string, array and data pointers) stays valid until gguf_close().
 */
struct gguf {
	char *path; /* as given to gguf_open, or the name given to gguf_open_mem */
	const unsigned char *base;
	size_t size;
	bool mapped; /* base is our mapping (gguf_open), unmapped by gguf_close */
	uint32_t version;
	uint32_t alignment;
	uint64_t data_offset; /* start of the data section in the file */
	size_t n_kv;
	struct gguf_kv *kvs; /* in file order */
	size_t n_tensors;
	struct gguf_tensor *tensors; /* in file order */
	/* internal */
	const struct gguf_kv **kv_by_name;
	const struct gguf_tensor **tensor_by_name;
	char *names; /* arena of the NUL-terminated keys and tensor names */
};

/*
 * Open `path`, map it read-only (MAP_PRIVATE) and parse and validate all of
 * it. On failure `g` is left closed (gguf_close on it is harmless) and `eb`
 * says why. The file must not be truncated by someone else while open: the
 * mapping would fault (SIGBUS).
 */
int gguf_open(struct gguf *g, const char *path, struct ig_errbuf *eb);

/*
 * Parse an image already in memory, `size` bytes at `buf`, with the same
 * checks as gguf_open. `name` (copied) stands for the file in messages. `buf`
 * stays the caller's: it must outlive gguf_close(g) and must not change.
 * Never reads outside [buf, buf + size).
 */
int gguf_open_mem(struct gguf *g, const void *buf, size_t size, const char *name,
                  struct ig_errbuf *eb);

/* Unmap and free everything. Idempotent; `g` is zeroed. */
void gguf_close(struct gguf *g);

/* The pair of `key`, or NULL. */
const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key);

/*
 * Typed getters: 0 and `*out` set when `key` exists with exactly the wanted
 * type; IG_E_NOTFOUND when it is missing; IG_E_INVAL naming the key, the type
 * found and the type wanted otherwise. `*out` is untouched on error. A string
 * from gguf_get_str is a view into the file image (not NUL-terminated).
 */
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out, struct ig_errbuf *eb);
int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out, struct ig_errbuf *eb);
int gguf_get_f32(const struct gguf *g, const char *key, float *out, struct ig_errbuf *eb);
int gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct ig_errbuf *eb);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out, struct ig_errbuf *eb);
/*
 * An array whose elements have type `elem` (a mismatch of the value type or of
 * the element type is IG_E_INVAL naming both). `*out` points into `g`.
 */
int gguf_get_arr(const struct gguf *g, const char *key, enum gguf_type elem, struct gguf_arr *out,
                 struct ig_errbuf *eb);
/* The i-th string of a STRING array `key`; IG_E_INVAL when i >= n. */
int gguf_get_arr_str(const struct gguf *g, const char *key, uint64_t i, struct gguf_str *out,
                     struct ig_errbuf *eb);

/* The tensor called `name`, or NULL. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);
/* Tensors and pairs by index in file order; NULL when out of range. */
const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, size_t i);
const struct gguf_kv *gguf_kv_at(const struct gguf *g, size_t i);

/* "UINT32" etc.; "unknown" outside the table. */
const char *gguf_type_name(uint32_t type);
/* Bytes of one scalar of `type`; 0 for STRING, ARRAY and unknown types. */
size_t gguf_type_size(uint32_t type);
/* ggml's name of a tensor type ("BF16", "Q4_0"); "unknown" for others. */
const char *gguf_tensor_type_name(uint32_t type);

/* ---- conversions --------------------------------------------------------- */

/* Exact. */
float gguf_bf16_to_f32(uint16_t h);
/* Round to nearest, ties to even; overflow gives Inf; NaN stays a (quiet) NaN. */
uint16_t gguf_f32_to_bf16(float f);
/* Exact (IEEE binary16, denormals included). */
float gguf_f16_to_f32(uint16_t h);
/* Round to nearest, ties to even; overflow gives Inf, underflow a denormal or
 * zero; NaN stays a (quiet) NaN. */
uint16_t gguf_f32_to_f16(float f);

/* ---- the writer ---------------------------------------------------------- */

struct gguf_wkv;
struct gguf_wtensor;

/*
 * The writer's one output buffer, and the most bytes a fill callback is asked
 * for at once: 4 MiB, so that a write(2) call costs little next to the bytes
 * it moves (12,000 calls for a 50 GB model), and the buffer stays in the
 * last-level cache between the callback's filling and the kernel's copy.
 */
#define GGUF_WRITE_CHUNK (4u << 20)

/*
 * Produces bytes [offset, offset + n) of tensor `t` into `buf`, as they go to
 * disk. `t` is the tensor as the file will describe it (`t->data` is NULL,
 * `t->offset` its offset in the data section); it is valid for the call only.
 * `offset` is a multiple of the writer's chunk, `n` at most the chunk, and
 * both are multiples of the element size. gguf_writer_write calls it in file
 * order, every byte of every such tensor exactly once. Returns 0, or an error
 * code with the message in `eb` (never NULL): the write then fails as a whole.
 */
typedef int (*gguf_fill_fn)(void *ctx, const struct gguf_tensor *t, uint64_t offset, void *buf,
                            size_t n, struct ig_errbuf *eb);

/*
 * Collects pairs and tensors, then writes a file. The caller embeds it:
 * gguf_writer_init, adds, gguf_writer_write, gguf_writer_release.
 *
 * Keys, names, string and array values are copied at the add. Tensor data is
 * REFERENCED, not copied (gguf_writer_add_tensor: `data` must stay valid and
 * unchanged until the last gguf_writer_write has returned), or PRODUCED while
 * the file is written (gguf_writer_add_tensor_fill: the callback and its
 * context must stay valid as long). Either way the writer itself holds the
 * pairs, the tensor list and one buffer of `chunk_bytes`: never the data.
 *
 * Every add returns 0 or an error code and records the first failure in
 * `err`; after a failure every later add and gguf_writer_write refuse with
 * that same error (a half-built file is never written).
 */
struct gguf_writer {
	struct gguf_wkv *kvs;
	size_t n_kv, cap_kv;
	struct gguf_wtensor *tensors;
	size_t n_tensors, cap_tensors;
	uint32_t alignment; /* GGUF_DEFAULT_ALIGNMENT, or general.alignment */
	struct ig_errbuf err;
	/* The caller may set these after gguf_writer_init: */
	size_t chunk_bytes; /* 0: GGUF_WRITE_CHUNK; otherwise a multiple of 64: the
	                       output buffer, the most one fill call or write(2) gets */
	/* Fault injection for tests: called instead of write(2) when set; it may
	 * write part and fail with errno as write(2) does. NULL in normal use. */
	ssize_t (*write_fn)(int fd, const void *buf, size_t n);
	/* When set: no tensor data is produced (no fill is called, no data
	 * read); the data section is left a hole of its exact size, which reads
	 * as zeros and takes no room on file systems that keep holes. A file of
	 * a real shape's exact layout for plans, written in a moment. */
	bool sparse;
};

void gguf_writer_init(struct gguf_writer *w);
/* Free everything. Idempotent; `w` is zeroed. */
void gguf_writer_release(struct gguf_writer *w);

/*
 * Scalars. `key`: non-empty valid UTF-8 without NUL; a key may be added once
 * (a duplicate is refused by gguf_writer_write). general.alignment must be a
 * UINT32 power of two.
 */
int gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v);
int gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v);
int gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v);
int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v);
int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v);
/* A NUL-terminated string; _strn takes `len` bytes as they are. */
int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *s);
int gguf_writer_add_strn(struct gguf_writer *w, const char *key, const char *s, size_t len);
/*
 * An array of `n` scalars of type `elem` (not STRING or ARRAY) read from a C
 * array of the matching type: uint8_t, int8_t, ..., float, bool, ..., double.
 * `elems` may be NULL when n is 0.
 */
int gguf_writer_add_arr(struct gguf_writer *w, const char *key, enum gguf_type elem,
                        const void *elems, size_t n);
/* An array of `n` NUL-terminated strings; _strn of `n` byte strings. */
int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            size_t n);
int gguf_writer_add_arr_strn(struct gguf_writer *w, const char *key, const struct gguf_str *strs,
                             size_t n);

/*
 * A tensor of `type` (one model/quant.h reads; a block type's rows whole
 * blocks) with `n_dims` (1..4) dims, dims[0] the fastest-moving, each >= 1;
 * `data` holds the n_bytes of the tensor and is referenced (see above).
 * Tensors are laid out in the order added, each at the next multiple of the
 * alignment; the header is padded to the alignment and so is the last tensor
 * (as llama.cpp writes). A duplicate name is refused by gguf_writer_write.
 */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *dims, const void *data);

/*
 * The same, the data produced by `fill(ctx, ...)` while gguf_writer_write
 * runs, in chunks of at most the writer's chunk_bytes (see gguf_fill_fn). The
 * streaming writer of big files: the bytes on disk are exactly those an
 * in-memory tensor holding what `fill` produces would give.
 */
int gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const uint64_t *dims, gguf_fill_fn fill,
                                void *ctx);

/*
 * The exact size in bytes of the file gguf_writer_write would write now, in
 * `*bytes`: the layout is computed and the content checked (duplicates
 * included) as gguf_writer_write does, nothing is written and no callback is
 * called. Errors as gguf_writer_write's refusals of content.
 */
int gguf_writer_file_size(struct gguf_writer *w, uint64_t *bytes, struct ig_errbuf *eb);

/*
 * Write the file atomically: a temporary file in the directory of `path`,
 * fsync, rename over `path`, fsync of the directory. On failure `path` is
 * untouched and the temporary file removed. Files are created mode 0644.
 * Every write is checked: a full disk is IG_E_IO naming `path`, the errno's
 * text, the bytes written and the bytes the file needs; a fill callback's
 * error is returned with its message prefixed by the quoted path.
 */
int gguf_writer_write(struct gguf_writer *w, const char *path, struct ig_errbuf *eb);

#endif
