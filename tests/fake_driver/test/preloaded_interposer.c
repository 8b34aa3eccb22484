/* Stands in for an LD_PRELOAD interposer: it defines one driver name, so that a test can check
 * the fake driver keeps handing out its own function, as the real driver does. The signature
 * does not matter: nobody calls it. */
int cuMemAlloc_v2(void) { return 999; }
