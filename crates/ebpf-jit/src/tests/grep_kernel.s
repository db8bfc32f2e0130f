# sdk/bench/grep.c as `clang -O2 -target bpf` compiled it (csx vm disasm, slot numbers
# and jump comments removed): a kernel whose codegen once followed hash-map order.
mov %r3, %r1
mov %r0, 0
ldxdw %r4, [%r3+16]
jeq %r4, 0, +66
jgt %r4, 32, +65
ldxdw %r2, [%r3+8]
jgt %r4, %r2, +63
mov %r5, 0
ldxb %r1, [%r3+24]
mov %r7, %r1
mov %r0, 0
mov %r8, 0
mov %r6, 0
stxdw [%r10-16], %r2
stxdw [%r10-24], %r7
mov %r1, %r3
add %r1, %r5
ldxb %r1, [%r1+64]
jne %r1, 10, +7
add %r0, %r8
mov %r8, 0
add %r5, 1
mov %r1, %r5
add %r1, %r4
jgt %r1, %r2, +38
ja -11
jne %r1, %r7, -6
stxdw [%r10-8], %r6
mov %r9, 1
mov %r2, 1
mov %r1, 2
jgt %r1, %r4, +20
mov %r1, %r3
add %r1, %r5
mov %r6, 0
mov %r2, %r1
add %r2, %r6
mov %r7, %r3
add %r7, %r6
ldxb %r7, [%r7+25]
ldxb %r2, [%r2+65]
jne %r2, %r7, +8
mov %r2, %r6
add %r2, 1
mov %r7, %r6
add %r7, 2
mov %r6, %r2
mov %r2, %r4
jgt %r4, %r7, -14
ja +2
add %r6, 1
mov %r2, %r6
mov %r1, 1
jeq %r2, %r4, +1
mov %r1, %r8
ldxdw %r6, [%r10-8]
ldxdw %r7, [%r10-24]
jeq %r2, %r4, +1
mov %r9, 0
add %r6, %r9
mov %r8, %r1
ldxdw %r2, [%r10-16]
ja -42
add %r0, %r8
xor %r0, %r6
lddw %r1, 0x100000001b3
mul %r0, %r1
rsh %r6, 29
add %r0, %r6
exit
