/*
 * A held-out kernel set for the JIT's known-region and loop work, written in full
 * before any of it was measured, as a user would write it (none tuned for, none edited
 * after measuring): `csx bench vm --kernels` this file. Each is
 * `u64 NAME(void *mem, u64 len)` over 64 KiB of random bytes (read-only). Shapes:
 * table-driven state machines, hashing into stack tables, string search, zigzag
 * varints, 2-D stencils over the input and over a stack tile, table-driven CRCs, a
 * parser with a class table, an S-box cipher round.
 */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* UTF-8 validation as a DFA: a byte-class table and a transition table, both .rodata. */
static const u8 utf8_class[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    11, 11, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 6, 6, 8, 9, 9, 9, 10, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11,
};
static const u8 utf8_next[9 * 12] = {
    0, 1, 1, 1, 2, 4, 3, 5, 7, 6, 8, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

u64 utf8dfa(void *mem, u64 len) {
    const u8 *p = mem;
    u32 state = 0;
    u64 chars = 0, errors = 0;
    for (u64 i = 0; i < len; i++) {
        state = utf8_next[state * 12 + utf8_class[p[i]]];
        if (state == 0)
            chars++;
        else if (state == 1) {
            errors++;
            state = 0;
        }
    }
    return chars * 1000003 + errors;
}

/* Hex runs: a digit-value table in .rodata, a value per run of hex digits. */
static const u8 hexval[256] = {
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 255, 255, 255, 255, 255, 255,
    255, 10, 11, 12, 13, 14, 15, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 10, 11, 12, 13, 14, 15, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
};

u64 hexruns(void *mem, u64 len) {
    const u8 *p = mem;
    u64 acc = 0, value = 0, digits = 0, runs = 0;
    for (u64 i = 0; i < len; i++) {
        u8 v = hexval[p[i] & 0x7f];
        if (v != 255) {
            value = (value << 4) | v;
            digits++;
        } else if (digits) {
            acc = acc * 31 + value;
            runs++;
            value = 0;
            digits = 0;
        }
    }
    return acc ^ (runs << 40);
}

/* CRC-16/CCITT-FALSE, MSB first, a 256-entry u16 table in .rodata. */
static const u16 crc16_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
    0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
    0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
    0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
    0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
    0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
    0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
    0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
    0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
    0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
    0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
    0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
    0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
    0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
    0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
    0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
    0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

u64 crc16t(void *mem, u64 len) {
    const u8 *p = mem;
    u32 crc = 0xffff;
    for (u64 i = 0; i < len; i++)
        crc = ((crc << 8) & 0xffff) ^ crc16_table[((crc >> 8) ^ p[i]) & 0xff];
    return crc;
}

/* CRC-64/XZ, reflected, a 256-entry u64 table in .rodata (2 KiB). */
static const u64 crc64_table[256] = {
    0x0000000000000000ULL, 0xb32e4cbe03a75f6fULL, 0xf4843657a840a05bULL,
    0x47aa7ae9abe7ff34ULL, 0x7bd0c384ff8f5e33ULL, 0xc8fe8f3afc28015cULL,
    0x8f54f5d357cffe68ULL, 0x3c7ab96d5468a107ULL, 0xf7a18709ff1ebc66ULL,
    0x448fcbb7fcb9e309ULL, 0x0325b15e575e1c3dULL, 0xb00bfde054f94352ULL,
    0x8c71448d0091e255ULL, 0x3f5f08330336bd3aULL, 0x78f572daa8d1420eULL,
    0xcbdb3e64ab761d61ULL, 0x7d9ba13851336649ULL, 0xceb5ed8652943926ULL,
    0x891f976ff973c612ULL, 0x3a31dbd1fad4997dULL, 0x064b62bcaebc387aULL,
    0xb5652e02ad1b6715ULL, 0xf2cf54eb06fc9821ULL, 0x41e11855055bc74eULL,
    0x8a3a2631ae2dda2fULL, 0x39146a8fad8a8540ULL, 0x7ebe1066066d7a74ULL,
    0xcd905cd805ca251bULL, 0xf1eae5b551a2841cULL, 0x42c4a90b5205db73ULL,
    0x056ed3e2f9e22447ULL, 0xb6409f5cfa457b28ULL, 0xfb374270a266cc92ULL,
    0x48190ecea1c193fdULL, 0x0fb374270a266cc9ULL, 0xbc9d3899098133a6ULL,
    0x80e781f45de992a1ULL, 0x33c9cd4a5e4ecdceULL, 0x7463b7a3f5a932faULL,
    0xc74dfb1df60e6d95ULL, 0x0c96c5795d7870f4ULL, 0xbfb889c75edf2f9bULL,
    0xf812f32ef538d0afULL, 0x4b3cbf90f69f8fc0ULL, 0x774606fda2f72ec7ULL,
    0xc4684a43a15071a8ULL, 0x83c230aa0ab78e9cULL, 0x30ec7c140910d1f3ULL,
    0x86ace348f355aadbULL, 0x3582aff6f0f2f5b4ULL, 0x7228d51f5b150a80ULL,
    0xc10699a158b255efULL, 0xfd7c20cc0cdaf4e8ULL, 0x4e526c720f7dab87ULL,
    0x09f8169ba49a54b3ULL, 0xbad65a25a73d0bdcULL, 0x710d64410c4b16bdULL,
    0xc22328ff0fec49d2ULL, 0x85895216a40bb6e6ULL, 0x36a71ea8a7ace989ULL,
    0x0adda7c5f3c4488eULL, 0xb9f3eb7bf06317e1ULL, 0xfe5991925b84e8d5ULL,
    0x4d77dd2c5823b7baULL, 0x64b62bcaebc387a1ULL, 0xd7986774e864d8ceULL,
    0x90321d9d438327faULL, 0x231c512340247895ULL, 0x1f66e84e144cd992ULL,
    0xac48a4f017eb86fdULL, 0xebe2de19bc0c79c9ULL, 0x58cc92a7bfab26a6ULL,
    0x9317acc314dd3bc7ULL, 0x2039e07d177a64a8ULL, 0x67939a94bc9d9b9cULL,
    0xd4bdd62abf3ac4f3ULL, 0xe8c76f47eb5265f4ULL, 0x5be923f9e8f53a9bULL,
    0x1c4359104312c5afULL, 0xaf6d15ae40b59ac0ULL, 0x192d8af2baf0e1e8ULL,
    0xaa03c64cb957be87ULL, 0xeda9bca512b041b3ULL, 0x5e87f01b11171edcULL,
    0x62fd4976457fbfdbULL, 0xd1d305c846d8e0b4ULL, 0x96797f21ed3f1f80ULL,
    0x2557339fee9840efULL, 0xee8c0dfb45ee5d8eULL, 0x5da24145464902e1ULL,
    0x1a083bacedaefdd5ULL, 0xa9267712ee09a2baULL, 0x955cce7fba6103bdULL,
    0x267282c1b9c65cd2ULL, 0x61d8f8281221a3e6ULL, 0xd2f6b4961186fc89ULL,
    0x9f8169ba49a54b33ULL, 0x2caf25044a02145cULL, 0x6b055fede1e5eb68ULL,
    0xd82b1353e242b407ULL, 0xe451aa3eb62a1500ULL, 0x577fe680b58d4a6fULL,
    0x10d59c691e6ab55bULL, 0xa3fbd0d71dcdea34ULL, 0x6820eeb3b6bbf755ULL,
    0xdb0ea20db51ca83aULL, 0x9ca4d8e41efb570eULL, 0x2f8a945a1d5c0861ULL,
    0x13f02d374934a966ULL, 0xa0de61894a93f609ULL, 0xe7741b60e174093dULL,
    0x545a57dee2d35652ULL, 0xe21ac88218962d7aULL, 0x5134843c1b317215ULL,
    0x169efed5b0d68d21ULL, 0xa5b0b26bb371d24eULL, 0x99ca0b06e7197349ULL,
    0x2ae447b8e4be2c26ULL, 0x6d4e3d514f59d312ULL, 0xde6071ef4cfe8c7dULL,
    0x15bb4f8be788911cULL, 0xa6950335e42fce73ULL, 0xe13f79dc4fc83147ULL,
    0x521135624c6f6e28ULL, 0x6e6b8c0f1807cf2fULL, 0xdd45c0b11ba09040ULL,
    0x9aefba58b0476f74ULL, 0x29c1f6e6b3e0301bULL, 0xc96c5795d7870f42ULL,
    0x7a421b2bd420502dULL, 0x3de861c27fc7af19ULL, 0x8ec62d7c7c60f076ULL,
    0xb2bc941128085171ULL, 0x0192d8af2baf0e1eULL, 0x4638a2468048f12aULL,
    0xf516eef883efae45ULL, 0x3ecdd09c2899b324ULL, 0x8de39c222b3eec4bULL,
    0xca49e6cb80d9137fULL, 0x7967aa75837e4c10ULL, 0x451d1318d716ed17ULL,
    0xf6335fa6d4b1b278ULL, 0xb199254f7f564d4cULL, 0x02b769f17cf11223ULL,
    0xb4f7f6ad86b4690bULL, 0x07d9ba1385133664ULL, 0x4073c0fa2ef4c950ULL,
    0xf35d8c442d53963fULL, 0xcf273529793b3738ULL, 0x7c0979977a9c6857ULL,
    0x3ba3037ed17b9763ULL, 0x888d4fc0d2dcc80cULL, 0x435671a479aad56dULL,
    0xf0783d1a7a0d8a02ULL, 0xb7d247f3d1ea7536ULL, 0x04fc0b4dd24d2a59ULL,
    0x3886b22086258b5eULL, 0x8ba8fe9e8582d431ULL, 0xcc0284772e652b05ULL,
    0x7f2cc8c92dc2746aULL, 0x325b15e575e1c3d0ULL, 0x8175595b76469cbfULL,
    0xc6df23b2dda1638bULL, 0x75f16f0cde063ce4ULL, 0x498bd6618a6e9de3ULL,
    0xfaa59adf89c9c28cULL, 0xbd0fe036222e3db8ULL, 0x0e21ac88218962d7ULL,
    0xc5fa92ec8aff7fb6ULL, 0x76d4de52895820d9ULL, 0x317ea4bb22bfdfedULL,
    0x8250e80521188082ULL, 0xbe2a516875702185ULL, 0x0d041dd676d77eeaULL,
    0x4aae673fdd3081deULL, 0xf9802b81de97deb1ULL, 0x4fc0b4dd24d2a599ULL,
    0xfceef8632775faf6ULL, 0xbb44828a8c9205c2ULL, 0x086ace348f355aadULL,
    0x34107759db5dfbaaULL, 0x873e3be7d8faa4c5ULL, 0xc094410e731d5bf1ULL,
    0x73ba0db070ba049eULL, 0xb86133d4dbcc19ffULL, 0x0b4f7f6ad86b4690ULL,
    0x4ce50583738cb9a4ULL, 0xffcb493d702be6cbULL, 0xc3b1f050244347ccULL,
    0x709fbcee27e418a3ULL, 0x3735c6078c03e797ULL, 0x841b8ab98fa4b8f8ULL,
    0xadda7c5f3c4488e3ULL, 0x1ef430e13fe3d78cULL, 0x595e4a08940428b8ULL,
    0xea7006b697a377d7ULL, 0xd60abfdbc3cbd6d0ULL, 0x6524f365c06c89bfULL,
    0x228e898c6b8b768bULL, 0x91a0c532682c29e4ULL, 0x5a7bfb56c35a3485ULL,
    0xe955b7e8c0fd6beaULL, 0xaeffcd016b1a94deULL, 0x1dd181bf68bdcbb1ULL,
    0x21ab38d23cd56ab6ULL, 0x9285746c3f7235d9ULL, 0xd52f0e859495caedULL,
    0x6601423b97329582ULL, 0xd041dd676d77eeaaULL, 0x636f91d96ed0b1c5ULL,
    0x24c5eb30c5374ef1ULL, 0x97eba78ec690119eULL, 0xab911ee392f8b099ULL,
    0x18bf525d915feff6ULL, 0x5f1528b43ab810c2ULL, 0xec3b640a391f4fadULL,
    0x27e05a6e926952ccULL, 0x94ce16d091ce0da3ULL, 0xd3646c393a29f297ULL,
    0x604a2087398eadf8ULL, 0x5c3099ea6de60cffULL, 0xef1ed5546e415390ULL,
    0xa8b4afbdc5a6aca4ULL, 0x1b9ae303c601f3cbULL, 0x56ed3e2f9e224471ULL,
    0xe5c372919d851b1eULL, 0xa26908783662e42aULL, 0x114744c635c5bb45ULL,
    0x2d3dfdab61ad1a42ULL, 0x9e13b115620a452dULL, 0xd9b9cbfcc9edba19ULL,
    0x6a978742ca4ae576ULL, 0xa14cb926613cf817ULL, 0x1262f598629ba778ULL,
    0x55c88f71c97c584cULL, 0xe6e6c3cfcadb0723ULL, 0xda9c7aa29eb3a624ULL,
    0x69b2361c9d14f94bULL, 0x2e184cf536f3067fULL, 0x9d36004b35545910ULL,
    0x2b769f17cf112238ULL, 0x9858d3a9ccb67d57ULL, 0xdff2a94067518263ULL,
    0x6cdce5fe64f6dd0cULL, 0x50a65c93309e7c0bULL, 0xe388102d33392364ULL,
    0xa4226ac498dedc50ULL, 0x170c267a9b79833fULL, 0xdcd7181e300f9e5eULL,
    0x6ff954a033a8c131ULL, 0x28532e49984f3e05ULL, 0x9b7d62f79be8616aULL,
    0xa707db9acf80c06dULL, 0x14299724cc279f02ULL, 0x5383edcd67c06036ULL,
    0xe0ada17364673f59ULL,
};

u64 crc64t(void *mem, u64 len) {
    const u8 *p = mem;
    u64 crc = ~0ULL;
    for (u64 i = 0; i < len; i++)
        crc = crc64_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* An LZ77 match finder: a hash of the next 4 (2-bit) symbols into a head table on the
 * stack, then the match length against the candidate, up to 16 symbols. */
u64 lzmatch(void *mem, u64 len) {
    const u8 *p = mem;
    u16 head[128];
    for (int i = 0; i < 128; i++)
        head[i] = 0xffff;
    u64 total = 0, matches = 0;
    u64 n = len < 60000 ? len : 60000;
    for (u64 i = 0; i + 20 < n;) {
        u32 key = (p[i] & 3) | (p[i + 1] & 3) << 2 | (p[i + 2] & 3) << 4 | (p[i + 3] & 3) << 6;
        u32 h = (key * 0x9e37u >> 5) & 127;
        u32 cand = head[h];
        head[h] = (u16)i;
        u64 l = 0;
        if (cand != 0xffff) {
            while (l < 16 && (p[cand + l] & 3) == (p[i + l] & 3))
                l++;
        }
        if (l >= 4) {
            matches++;
            total += l;
            i += l;
        } else {
            i++;
        }
    }
    return total * 65537 + matches;
}

/* Counting distinct 10-bit keys in an open-addressing table on the stack (linear
 * probing); the table is emptied when three quarters full. */
u64 hashcnt(void *mem, u64 len) {
    const u8 *p = mem;
    u16 keys[128];
    u8 counts[128];
    for (int i = 0; i < 128; i++) {
        keys[i] = 0xffff;
        counts[i] = 0;
    }
    u64 used = 0, flushed = 0, bumps = 0;
    for (u64 i = 0; i + 1 < len; i += 2) {
        u16 k = (p[i] ^ (p[i + 1] << 3)) & 0x3ff;
        u32 s = (k * 40503u >> 4) & 127;
        while (keys[s] != 0xffff && keys[s] != k)
            s = (s + 1) & 127;
        if (keys[s] == k) {
            counts[s]++;
            bumps++;
        } else {
            keys[s] = k;
            counts[s] = 1;
            if (++used == 96) {
                for (int j = 0; j < 128; j++) {
                    flushed += counts[j] * (u64)(j + 1);
                    keys[j] = 0xffff;
                    counts[j] = 0;
                }
                used = 0;
            }
        }
    }
    return flushed * 31 + bumps + used;
}

/* Boyer-Moore-Horspool: every occurrence of the 5 bytes at offset 1000 (so there is at
 * least one), with a 256-entry shift table on the stack. */
u64 horspool(void *mem, u64 len) {
    const u8 *p = mem;
    if (len < 1005)
        return 0;
    const u8 *pat = p + 1000;
    u8 shift[256];
    for (int i = 0; i < 256; i++)
        shift[i] = 5;
    for (int i = 0; i < 4; i++)
        shift[pat[i]] = 4 - i;
    u64 found = 0, where = 0;
    for (u64 i = 0; i + 5 <= len;) {
        u8 last = p[i + 4];
        if (last == pat[4] && p[i] == pat[0] && p[i + 1] == pat[1] && p[i + 2] == pat[2] &&
            p[i + 3] == pat[3]) {
            found++;
            where += i;
        }
        i += shift[last];
    }
    return found * 1000000007 + where;
}

/* Packed zigzag varints (protobuf sint64), delta-decoded into a running value. */
u64 zigzag(void *mem, u64 len) {
    const u8 *p = mem;
    u64 i = 0, count = 0;
    u64 cur = 0;
    u64 mix = 0;
    while (i < len) {
        u64 v = 0;
        u32 shift = 0;
        u8 b;
        do {
            b = p[i++];
            v |= (u64)(b & 0x7f) << shift;
            shift += 7;
        } while ((b & 0x80) && shift < 64 && i < len);
        long long d = (long long)(v >> 1) ^ -(long long)(v & 1);
        cur += (u64)d;
        mix = (mix ^ cur) * 0x100000001b3ULL;
        count++;
    }
    return mix + count;
}

/* A 3x3 box filter over the input as a 256-byte-wide image: the sum of the filtered
 * pixels and the count above a threshold. */
u64 blur3(void *mem, u64 len) {
    const u8 *img = mem;
    u64 w = 256, h = len / 256;
    u64 sum = 0, bright = 0;
    for (u64 y = 1; y + 1 < h; y++) {
        const u8 *a = img + (y - 1) * w, *b = img + y * w, *c = img + (y + 1) * w;
        for (u64 x = 1; x + 1 < w; x++) {
            u32 s = a[x - 1] + a[x] + a[x + 1] + b[x - 1] + b[x] + b[x + 1] + c[x - 1] + c[x] +
                    c[x + 1];
            u32 f = s / 9;
            sum += f;
            bright += f > 140;
        }
    }
    return sum * 7 + bright;
}

/* Conway's life on 16x16 tiles of the input (one bit per cell) held on the stack with
 * a dead border, four generations per tile. */
u64 life(void *mem, u64 len) {
    const u8 *p = mem;
    u8 cell[18 * 18];
    u16 next[16];
    u64 alive = 0;
    for (u64 t = 0; t + 32 <= len && t < 8192; t += 32) {
        for (int i = 0; i < 18 * 18; i++)
            cell[i] = 0;
        for (int y = 0; y < 16; y++) {
            u16 row = p[t + 2 * y] | p[t + 2 * y + 1] << 8;
            for (int x = 0; x < 16; x++)
                cell[(y + 1) * 18 + x + 1] = (row >> x) & 1;
        }
        for (int g = 0; g < 4; g++) {
            for (int y = 1; y <= 16; y++) {
                u16 row = 0;
                for (int x = 1; x <= 16; x++) {
                    int n = cell[(y - 1) * 18 + x - 1] + cell[(y - 1) * 18 + x] +
                            cell[(y - 1) * 18 + x + 1] + cell[y * 18 + x - 1] +
                            cell[y * 18 + x + 1] + cell[(y + 1) * 18 + x - 1] +
                            cell[(y + 1) * 18 + x] + cell[(y + 1) * 18 + x + 1];
                    int live = n == 3 || (n == 2 && cell[y * 18 + x]);
                    row |= (u16)live << (x - 1);
                }
                next[y - 1] = row;
            }
            for (int y = 0; y < 16; y++)
                for (int x = 0; x < 16; x++)
                    cell[(y + 1) * 18 + x + 1] = (next[y] >> x) & 1;
        }
        for (int y = 0; y < 16; y++)
            alive += __builtin_popcount(next[y]) * (u64)(y + 1);
    }
    return alive;
}

/* A key=value;... parser as a switch state machine over byte classes (b % 5: letter,
 * digit, '=', ';', space): a hash of each key and the sum of its values. */
u64 kvparse(void *mem, u64 len) {
    const u8 *p = mem;
    enum { KEY, VALUE, SKIP } st = KEY;
    u64 keyh = 0, val = 0, acc = 0, pairs = 0;
    for (u64 i = 0; i < len; i++) {
        u8 b = p[i];
        u32 c = b % 5;
        switch (st) {
        case KEY:
            if (c == 0)
                keyh = keyh * 33 + b;
            else if (c == 2 && keyh)
                st = VALUE;
            else if (c == 3 || c == 1) {
                keyh = 0;
                st = c == 1 ? SKIP : KEY;
            }
            break;
        case VALUE:
            if (c == 1)
                val = val * 10 + b % 10;
            else if (c == 3) {
                acc += keyh ^ val;
                pairs++;
                keyh = 0;
                val = 0;
                st = KEY;
            } else if (c != 4) {
                keyh = 0;
                val = 0;
                st = SKIP;
            }
            break;
        case SKIP:
            if (c == 3)
                st = KEY;
            break;
        }
    }
    return acc + (pairs << 48);
}

/* Four substitution-permutation rounds over each 8-byte block: an S-box in .rodata,
 * a round key, a rotation. */
static const u8 sbox[256] = {
    0x0d, 0xb4, 0x5b, 0x02, 0xa9, 0x50, 0xf7, 0x9e, 0x44, 0xed, 0x92, 0x3b, 0xe0, 0x89, 0x2e, 0xd7,
    0x7f, 0x26, 0xc9, 0x70, 0x1b, 0xc2, 0x65, 0x0c, 0xb6, 0x5f, 0x00, 0xaa, 0x52, 0xfb, 0x9c, 0x45,
    0xe9, 0x90, 0x3f, 0xe6, 0x8d, 0x34, 0xd3, 0x7a, 0x20, 0xca, 0x76, 0x1f, 0xc4, 0x6d, 0x0a, 0xb3,
    0x5c, 0x03, 0xad, 0x54, 0xff, 0xa6, 0x41, 0xe8, 0x93, 0x3c, 0xe4, 0x8e, 0x36, 0xdf, 0x78, 0x21,
    0xc5, 0x7c, 0x13, 0xcb, 0x61, 0x18, 0xbf, 0x56, 0x0e, 0xa5, 0x5a, 0xf3, 0xa8, 0x42, 0xe7, 0x9f,
    0x37, 0xee, 0x81, 0x38, 0xd4, 0x8a, 0x2d, 0xc6, 0x7e, 0x17, 0xc8, 0x62, 0x1a, 0xb5, 0x55, 0x0f,
    0xa1, 0x58, 0xf8, 0xae, 0x46, 0xfc, 0x9b, 0x32, 0xea, 0x82, 0x3e, 0xd8, 0x8c, 0x25, 0xc3, 0x7b,
    0x14, 0xcc, 0x66, 0x1c, 0xb7, 0x6e, 0x09, 0xa0, 0x5d, 0xf4, 0xac, 0x47, 0xfe, 0x97, 0x30, 0xeb,
    0x9d, 0x24, 0xcd, 0x94, 0x39, 0xc0, 0x67, 0x10, 0xd5, 0x7d, 0x04, 0xab, 0x71, 0x19, 0xbe, 0x48,
    0xef, 0xb8, 0x59, 0xe1, 0x8b, 0x53, 0xf5, 0xa2, 0x27, 0xcf, 0x91, 0x3a, 0xc7, 0x6b, 0x11, 0xd6,
    0x79, 0x01, 0xaf, 0x77, 0x1d, 0xa4, 0x43, 0xec, 0xb0, 0x5e, 0xf0, 0x8f, 0x57, 0xfd, 0x9a, 0x23,
    0xce, 0x95, 0x3d, 0xd0, 0x6f, 0x40, 0xd1, 0x80, 0x05, 0xb1, 0x74, 0x1e, 0xa7, 0x4f, 0xf1, 0xb2,
    0x60, 0xf2, 0x83, 0x63, 0xf6, 0x88, 0x2f, 0xd2, 0xa3, 0x35, 0xd9, 0x64, 0x49, 0xda, 0x84, 0x12,
    0xb9, 0x85, 0x15, 0xba, 0x4a, 0x22, 0xbd, 0x68, 0xf9, 0x87, 0x69, 0xfa, 0x96, 0x28, 0xdb, 0xbb,
    0x31, 0xdc, 0x6a, 0x4b, 0xdd, 0x6c, 0x0b, 0xbc, 0x86, 0x16, 0xc1, 0x4c, 0x29, 0xde, 0x72, 0x06,
    0x98, 0x73, 0x07, 0x99, 0x2a, 0x08, 0xe2, 0x33, 0xe3, 0x75, 0x4d, 0xe5, 0x2b, 0x2c, 0x4e, 0x51,
};

u64 sboxmix(void *mem, u64 len) {
    const u64 *w = mem;
    u64 acc = 0;
    for (u64 i = 0; i < len / 8; i++) {
        u64 x = w[i];
        for (int r = 0; r < 4; r++) {
            u64 y = 0;
            for (int k = 0; k < 8; k++)
                y |= (u64)sbox[((x >> (8 * k)) ^ (r * 0x3b + k)) & 0xff] << (8 * k);
            x = (y << 13) | (y >> 51);
        }
        acc += x;
    }
    return acc;
}
