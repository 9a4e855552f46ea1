/* A growable byte buffer and the text forms the load generator writes: JSON strings as
 * Python's json.dumps writes them (ensure_ascii), hex, base64. */
#ifndef LOADGEN_BUF_H
#define LOADGEN_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;
    size_t len;
    size_t cap;
} buf_t;

void buf_init(buf_t *b, size_t cap);
void buf_free(buf_t *b);
void buf_reset(buf_t *b);
void buf_reserve(buf_t *b, size_t extra);
void buf_put(buf_t *b, const void *data, size_t len);
void buf_puts(buf_t *b, const char *text);
void buf_putc(buf_t *b, char c);
void buf_printf(buf_t *b, const char *format, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal (quotes included) of UTF-8 text, escaped like Python's json.dumps
 * with ensure_ascii=True: \uXXXX (lower-case hex, surrogate pairs) for everything outside
 * printable ASCII. */
/* Decimal integers, without printf. */
void buf_u64(buf_t *b, uint64_t value);
void buf_i64(buf_t *b, int64_t value);
void buf_json_string(buf_t *b, const char *text, size_t len);
void buf_hex(buf_t *b, const unsigned char *data, size_t len);
void buf_base64(buf_t *b, const unsigned char *data, size_t len);

#endif
