/* The driver's checkpoint API called directly on one process, timed: the baseline cuslice's
 * suspensions are compared with (bench/preemption/run.py).
 *
 *   raw_checkpoint PID [--hold-s S]
 *
 * Locks PID, checkpoints it (its GPU memory goes to host memory), waits S seconds (default 1),
 * restores and unlocks it, and prints one JSON line: the seconds each step took and the state
 * the driver reported after each. Exit 0 when every step succeeded; 1 with "error" naming the
 * step and the CUresult otherwise (the process is then left in whatever state the driver says).
 * libcuda.so.1 is opened at run time, so this builds with the toolkit's headers alone. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*Init)(unsigned int);
typedef CUresult (*Lock)(int, CUcheckpointLockArgs*);
typedef CUresult (*Checkpoint)(int, CUcheckpointCheckpointArgs*);
typedef CUresult (*Restore)(int, CUcheckpointRestoreArgs*);
typedef CUresult (*Unlock)(int, CUcheckpointUnlockArgs*);
typedef CUresult (*GetState)(int, CUprocessState*);

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void* need(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    printf("{\"error\": \"the driver has no %s (driver 550 or later is needed)\"}\n", name);
    exit(2);
  }
  return f;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PID [--hold-s S]\n", argv[0]);
    return 2;
  }
  const int pid = atoi(argv[1]);
  double hold = 1.0;
  if (argc >= 4 && strcmp(argv[2], "--hold-s") == 0) hold = atof(argv[3]);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == NULL) {
    printf("{\"error\": \"cannot load libcuda.so.1\"}\n");
    return 2;
  }
  Init init = (Init)need(lib, "cuInit");
  Lock lock = (Lock)need(lib, "cuCheckpointProcessLock");
  Checkpoint checkpoint = (Checkpoint)need(lib, "cuCheckpointProcessCheckpoint");
  Restore restore = (Restore)need(lib, "cuCheckpointProcessRestore");
  Unlock unlock = (Unlock)need(lib, "cuCheckpointProcessUnlock");
  GetState state = (GetState)need(lib, "cuCheckpointProcessGetState");
  if (init(0) != CUDA_SUCCESS) {
    printf("{\"error\": \"cuInit failed\"}\n");
    return 2;
  }
  const char* steps[4] = {"lock", "checkpoint", "restore", "unlock"};
  double took[4] = {0, 0, 0, 0};
  int states[4] = {-1, -1, -1, -1};
  for (int i = 0; i < 4; ++i) {
    if (i == 2) usleep((useconds_t)(hold * 1e6));
    const double start = now_s();
    CUresult rc = CUDA_SUCCESS;
    switch (i) {
      case 0: {
        CUcheckpointLockArgs args;
        memset(&args, 0, sizeof args);
        args.timeoutMs = 30000;
        rc = lock(pid, &args);
        break;
      }
      case 1: rc = checkpoint(pid, NULL); break;
      case 2: rc = restore(pid, NULL); break;
      case 3: rc = unlock(pid, NULL); break;
    }
    took[i] = now_s() - start;
    CUprocessState s = CU_PROCESS_STATE_FAILED;
    states[i] = state(pid, &s) == CUDA_SUCCESS ? (int)s : -1;
    if (rc != CUDA_SUCCESS) {
      printf("{\"error\": \"%s failed with CUresult %d\", \"step\": \"%s\", \"state\": %d}\n", steps[i], (int)rc,
             steps[i], states[i]);
      return 1;
    }
  }
  printf("{\"pid\": %d, \"lock_s\": %.6f, \"checkpoint_s\": %.6f, \"restore_s\": %.6f, \"unlock_s\": %.6f, "
         "\"states\": [%d, %d, %d, %d]}\n",
         pid, took[0], took[1], took[2], took[3], states[0], states[1], states[2], states[3]);
  return 0;
}
