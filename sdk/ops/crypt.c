/*
 * encrypt / decrypt: ChaCha20 (RFC 8439) over the stream, through the accelerated
 * device function csx_chacha20 (Metal FS's encrypt and decrypt operators). A stream
 * cipher: the two are one transformation, so one program serves both names.
 *
 * Params: key @0 (32 bytes), nonce @32 (12 bytes): the stream's keystream starts at
 * block 0 of that key and nonce.
 * State: the stream bytes done so far (the keystream offset of the next chunk).
 * Output capacity: the input's length.
 */
#include "ops.h"

struct crypt_state {
    csx_u64 offset;
};

CSX_PROGRAM(crypt)
{
    struct crypt_state *st = CSX_OP_STATE(args);
    csx_u8 *out = CSX_OP_OUT(args);
    unsigned long len = CSX_OP_IN_LEN(args);
    if (!st || CSX_OP_STATE_LEN(args) < sizeof(*st) || CSX_OP_OUT_CAP(args) < len)
        return CSX_ENOSPC;
    if (args->params_len < 44)
        return CSX_EINVAL;
    if (!len)
        return 0;
    csx_memcpy(out, CSX_OP_IN(args), len);
    long r = csx_chacha20(args->params, 44, st->offset, out, len);
    if (r < 0)
        return r;
    st->offset += len;
    return len;
}
