/* UTF-8 validation shared by the decoder (kernel.h) and the JSONL parser
 * (kafkastore/_jsonl_native.c): header-only, so each inlines it. */
#ifndef KAFKASTORE_UTF8_H
#define KAFKASTORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* UTF-8 validation (same acceptance as Python's strict utf-8 codec)   */
/* ------------------------------------------------------------------ */

/* Length (1-4) of the valid UTF-8 sequence that starts s[0..n), or 0 if none does:
 * no overlong forms, no surrogates, nothing past U+10FFFF (Python's decoder). */
static inline size_t utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    uint8_t lo = 0x80, hi = 0xbf;
    size_t need;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
    } else if (c >= 0xe0 && c <= 0xf4) {
        need = c < 0xf0 ? 2 : 3;
        /* Second-byte bounds that refuse overlong forms (e0, f0), surrogates (ed) and
         * code points past U+10FFFF (f4). */
        switch (c) {
        case 0xe0: lo = 0xa0; break;
        case 0xed: hi = 0x9f; break;
        case 0xf0: lo = 0x90; break;
        case 0xf4: hi = 0x8f; break;
        default: break;
        }
    } else {
        return 0;
    }
    if (n - 1 < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k <= need; k++)
        if ((s[k] & 0xc0) != 0x80)
            return 0;
    return need + 1;
}

static inline int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq(s + i, n - i);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

#endif /* KAFKASTORE_UTF8_H */
