#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die_oom(void) {
    fputs("loadgen: out of memory\n", stderr);
    exit(70);
}

void buf_init(buf_t *b, size_t cap) {
    b->data = malloc(cap ? cap : 64);
    if (b->data == NULL) die_oom();
    b->len = 0;
    b->cap = cap ? cap : 64;
}

void buf_free(buf_t *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void buf_reset(buf_t *b) { b->len = 0; }

void buf_reserve(buf_t *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap * 2;
    while (cap < b->len + extra + 1) cap *= 2;
    char *grown = realloc(b->data, cap);
    if (grown == NULL) die_oom();
    b->data = grown;
    b->cap = cap;
}

void buf_put(buf_t *b, const void *data, size_t len) {
    buf_reserve(b, len);
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void buf_puts(buf_t *b, const char *text) { buf_put(b, text, strlen(text)); }

void buf_putc(buf_t *b, char c) {
    buf_reserve(b, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void buf_printf(buf_t *b, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int need = vsnprintf(b->data + b->len, b->cap - b->len, format, args);
    va_end(args);
    if (need < 0) return;
    if ((size_t)need >= b->cap - b->len) {
        buf_reserve(b, (size_t)need);
        va_start(args, format);
        vsnprintf(b->data + b->len, b->cap - b->len, format, args);
        va_end(args);
    }
    b->len += (size_t)need;
}

void buf_u64(buf_t *b, uint64_t value) {
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    buf_reserve(b, (size_t)n);
    while (n) b->data[b->len++] = digits[--n];
    b->data[b->len] = '\0';
}

void buf_i64(buf_t *b, int64_t value) {
    if (value < 0) {
        buf_putc(b, '-');
        buf_u64(b, (uint64_t)0 - (uint64_t)value);
    } else {
        buf_u64(b, (uint64_t)value);
    }
}

/* The next code point of UTF-8 text at *pos; a byte that starts no complete sequence stands
 * for itself (the generator only writes valid UTF-8). */
static uint32_t next_code_point(const unsigned char *s, size_t len, size_t *pos) {
    unsigned char c = s[*pos];
    size_t extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    if (extra == 0 || *pos + extra >= len) {
        (*pos)++;
        return c;
    }
    uint32_t cp = c & (0x3fu >> extra);
    for (size_t i = 1; i <= extra; i++) cp = (cp << 6) | (s[*pos + i] & 0x3fu);
    *pos += extra + 1;
    return cp;
}

void buf_json_string(buf_t *b, const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    buf_reserve(b, len + 2);
    buf_putc(b, '"');
    size_t pos = 0;
    while (pos < len) {
        uint32_t cp = next_code_point(s, len, &pos);
        switch (cp) {
            case '"': buf_put(b, "\\\"", 2); continue;
            case '\\': buf_put(b, "\\\\", 2); continue;
            case '\n': buf_put(b, "\\n", 2); continue;
            case '\r': buf_put(b, "\\r", 2); continue;
            case '\t': buf_put(b, "\\t", 2); continue;
            case '\b': buf_put(b, "\\b", 2); continue;
            case '\f': buf_put(b, "\\f", 2); continue;
            default: break;
        }
        if (cp >= 0x20 && cp <= 0x7e) {
            buf_putc(b, (char)cp);
        } else if (cp < 0x10000) {
            buf_printf(b, "\\u%04x", cp);
        } else {
            uint32_t v = cp - 0x10000;
            buf_printf(b, "\\u%04x\\u%04x", 0xd800 | (v >> 10), 0xdc00 | (v & 0x3ff));
        }
    }
    buf_putc(b, '"');
}

void buf_hex(buf_t *b, const unsigned char *data, size_t len) {
    static const char digits[] = "0123456789abcdef";
    buf_reserve(b, len * 2);
    for (size_t i = 0; i < len; i++) {
        b->data[b->len++] = digits[data[i] >> 4];
        b->data[b->len++] = digits[data[i] & 15];
    }
    b->data[b->len] = '\0';
}

void buf_base64(buf_t *b, const unsigned char *data, size_t len) {
    static const char table[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    buf_reserve(b, (len + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];
        buf_putc(b, table[v >> 18]);
        buf_putc(b, table[(v >> 12) & 63]);
        buf_putc(b, table[(v >> 6) & 63]);
        buf_putc(b, table[v & 63]);
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)data[i] << 16;
        buf_putc(b, table[v >> 18]);
        buf_putc(b, table[(v >> 12) & 63]);
        buf_puts(b, "==");
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8;
        buf_putc(b, table[v >> 18]);
        buf_putc(b, table[(v >> 12) & 63]);
        buf_putc(b, table[(v >> 6) & 63]);
        buf_putc(b, '=');
    }
}
