/* The sample keyspace's vindexes (Vitess `hash` and `xxhash`) and key ranges. */
#ifndef LOADGEN_VINDEX_H
#define LOADGEN_VINDEX_H

#include <stddef.h>
#include <stdint.h>

#define KSID_LEN 8

/* Call once before hash_ksid, before starting threads. */
void vindex_init(void);
/* Vitess `hash`: DES-ECB with an all-zero key over the big-endian uint64. */
void hash_ksid(uint64_t value, unsigned char out[KSID_LEN]);
/* Vitess `xxhash`: XXH64 (seed 0) of the bytes, stored little-endian. */
void xxhash_ksid(const char *data, size_t len, unsigned char out[KSID_LEN]);

/* A key range [start, end) over keyspace ids; an empty bound is open. */
typedef struct {
    unsigned char start[KSID_LEN];
    size_t start_len;
    unsigned char end[KSID_LEN];
    size_t end_len;
} key_range_t;

/* Parse `-80`, `40-80`, `80-`, `-`; returns 0, or -1 for a malformed range. */
int key_range_parse(const char *text, key_range_t *out);
int key_range_contains(const key_range_t *range, const unsigned char ksid[KSID_LEN]);

#endif
