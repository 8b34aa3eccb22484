/*
 * The exported dlsym and dlvsym.
 *
 * Each asks cuslice_dlsym_intercept / cuslice_dlvsym_intercept (dlsym_hook.cpp) whether the
 * name is one of ours. If it is, the hook's address is returned. If not, the trampoline
 * restores the arguments and JUMPS (not calls) to glibc's function, so glibc sees the
 * original caller's return address: dlsym(RTLD_NEXT, ...) keeps meaning "next after the
 * caller" for every other library. A C++ wrapper cannot guarantee that tail jump.
 */
#if defined(__x86_64__)

    .text

    .globl  dlsym
    .type   dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    endbr64
    pushq   %rdi
    .cfi_adjust_cfa_offset 8
    pushq   %rsi
    .cfi_adjust_cfa_offset 8
    subq    $8, %rsp                    /* 16-byte alignment for the call */
    .cfi_adjust_cfa_offset 8
    call    cuslice_dlsym_intercept
    addq    $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq    %rsi
    .cfi_adjust_cfa_offset -8
    popq    %rdi
    .cfi_adjust_cfa_offset -8
    testq   %rax, %rax
    jz      1f
    ret
1:
    jmp     *cuslice_next_dlsym(%rip)
    .cfi_endproc
    .size   dlsym, .-dlsym

    .globl  dlvsym
    .type   dlvsym, @function
    .p2align 4
dlvsym:
    .cfi_startproc
    endbr64
    pushq   %rdi
    .cfi_adjust_cfa_offset 8
    pushq   %rsi
    .cfi_adjust_cfa_offset 8
    pushq   %rdx                        /* three pushes keep the 16-byte alignment */
    .cfi_adjust_cfa_offset 8
    call    cuslice_dlvsym_intercept
    popq    %rdx
    .cfi_adjust_cfa_offset -8
    popq    %rsi
    .cfi_adjust_cfa_offset -8
    popq    %rdi
    .cfi_adjust_cfa_offset -8
    testq   %rax, %rax
    jz      1f
    ret
1:
    jmp     *cuslice_next_dlvsym(%rip)
    .cfi_endproc
    .size   dlvsym, .-dlvsym

#else
#error "cuslice's dlsym trampoline is written for x86-64 only (aarch64 is not yet supported)"
#endif

    .section .note.GNU-stack, "", @progbits
