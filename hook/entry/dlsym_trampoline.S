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

/* The exported function `name`, with the two arguments dlsym and dlvsym share saved. */
.macro CUSLICE_TRAMPOLINE_BEGIN name
    .globl  \name
    .type   \name, @function
    .p2align 4
\name:
    .cfi_startproc
    endbr64
    pushq   %rdi
    .cfi_adjust_cfa_offset 8
    pushq   %rsi
    .cfi_adjust_cfa_offset 8
.endm

/* Those two restored; then the hook's address returned, or the jump to glibc's `next`. */
.macro CUSLICE_TRAMPOLINE_END name, next
    popq    %rsi
    .cfi_adjust_cfa_offset -8
    popq    %rdi
    .cfi_adjust_cfa_offset -8
    testq   %rax, %rax
    jz      1f
    ret
1:
    jmp     *\next(%rip)
    .cfi_endproc
    .size   \name, .-\name
.endm

CUSLICE_TRAMPOLINE_BEGIN dlsym
    subq    $8, %rsp                    /* 16-byte alignment for the call */
    .cfi_adjust_cfa_offset 8
    call    cuslice_dlsym_intercept
    addq    $8, %rsp
    .cfi_adjust_cfa_offset -8
CUSLICE_TRAMPOLINE_END dlsym, cuslice_next_dlsym

CUSLICE_TRAMPOLINE_BEGIN dlvsym
    pushq   %rdx                        /* three pushes keep the 16-byte alignment */
    .cfi_adjust_cfa_offset 8
    call    cuslice_dlvsym_intercept
    popq    %rdx
    .cfi_adjust_cfa_offset -8
CUSLICE_TRAMPOLINE_END dlvsym, cuslice_next_dlvsym

#else
#error "cuslice's dlsym trampoline is written for x86-64 only (aarch64 is not yet supported)"
#endif

    .section .note.GNU-stack, "", @progbits
