/* Helper of test_doors.cpp: the definition that follows A's in the search order. */
char probe_symbol(void) { return 'B'; }
