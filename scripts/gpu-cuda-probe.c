/* cuda-probe: what the CUDA driver says, before anything else in the GPU bundle touches it.
 * Built by scripts/gpu-bundle into DIR/bin/cuda-probe, run by DIR/check.sh for its preconditions.
 * Loads libcuda.so.1 with dlopen (so it runs, and says so, where there is no driver), calls
 * cuDriverGetVersion, then cuInit and, for each device, its name, compute capability, compute
 * mode and PCI address. Creates no context, so it never holds a GPU in Exclusive_Process mode.
 *
 * Output, one key=value per line:
 *   libcuda=libcuda.so.1
 *   driver_cuda=12040 (12.4)
 *   devices=1
 *   device0=name=NVIDIA H200;cc=9.0;compute_mode=Default;pci=0000:19:00.0
 * Exit status: 0 fine, 3 libcuda could not be loaded, 4 a driver call failed, 5 no device.
 *
 * cuda-probe copy [BYTES [COPIES]]: the check's reference figure without PyTorch: GPU 0's own
 * device-to-device copy bandwidth, as nvbandwidth's same-device copy: two BYTES buffers
 * (cuMemAlloc, default 1 GiB), three copies to warm up, then COPIES (default 20)
 * cuMemcpyDtoDAsync on the null stream timed by two events; bytes copied per second (GB/s,
 * 1e9), the figure a pairwise copy over IPC is set against. It retains GPU 0's primary context,
 * as meshrun does. Output:
 *   copy_bytes=1073741824
 *   copy_ms=0.712
 *   copy_gbs=1508.1
 *   OK: GPU 0 NVIDIA H200: 1 GiB device-to-device copy 0.712 ms, 1508.1 GB/s (cuMemcpyDtoD, 20 copies)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fn_int)(int *);
typedef int (*fn_uint)(unsigned int);
typedef int (*fn_dev_get)(int *, int);
typedef int (*fn_name)(char *, int, int);
typedef int (*fn_attr)(int *, int, int);
typedef int (*fn_errname)(int, const char **);

static const char *mode_name(int m) {
  switch (m) {
  case 0: return "Default";
  case 1: return "Exclusive_Thread";
  case 2: return "Prohibited";
  case 3: return "Exclusive_Process";
  default: return "unknown";
  }
}

static fn_errname err_name;
static int fail(const char *call, int rc) {
  const char *n = "?";
  if (err_name) err_name(rc, &n);
  printf("error=%s returned %d (%s)\n", call, rc, n ? n : "?");
  return 4;
}

typedef unsigned long long devptr;
typedef int (*fn_retain)(void **, int);
typedef int (*fn_set)(void *);
typedef int (*fn_alloc)(devptr *, size_t);
typedef int (*fn_free)(devptr);
typedef int (*fn_dtod)(devptr, devptr, size_t, void *);
typedef int (*fn_ev_create)(void **, unsigned);
typedef int (*fn_ev_record)(void *, void *);
typedef int (*fn_ev_sync)(void *);
typedef int (*fn_ev_time)(float *, void *, void *);

/* The copy mode: GPU 0's device-to-device copy of `bytes`, `copies` times, timed by events. */
static int copy_bandwidth(void *h, size_t bytes, int copies) {
  fn_uint init = (fn_uint)dlsym(h, "cuInit");
  fn_dev_get get = (fn_dev_get)dlsym(h, "cuDeviceGet");
  fn_name name = (fn_name)dlsym(h, "cuDeviceGetName");
  fn_retain retain = (fn_retain)dlsym(h, "cuDevicePrimaryCtxRetain");
  fn_set set = (fn_set)dlsym(h, "cuCtxSetCurrent");
  fn_alloc alloc = (fn_alloc)dlsym(h, "cuMemAlloc_v2");
  fn_free mfree = (fn_free)dlsym(h, "cuMemFree_v2");
  fn_dtod dtod = (fn_dtod)dlsym(h, "cuMemcpyDtoDAsync_v2");
  fn_ev_create ev_create = (fn_ev_create)dlsym(h, "cuEventCreate");
  fn_ev_record ev_record = (fn_ev_record)dlsym(h, "cuEventRecord");
  fn_ev_sync ev_sync = (fn_ev_sync)dlsym(h, "cuEventSynchronize");
  fn_ev_time ev_time = (fn_ev_time)dlsym(h, "cuEventElapsedTime");
  if (!init || !get || !name || !retain || !set || !alloc || !mfree || !dtod || !ev_create || !ev_record ||
      !ev_sync || !ev_time) {
    printf("error=libcuda lacks a driver API entry point for the copy (cuMemAlloc_v2, cuMemcpyDtoDAsync_v2, cuEvent...)\n");
    return 4;
  }
  int d = 0, rc;
  char nm[256] = "?";
  void *ctx = NULL, *start = NULL, *stop = NULL;
  devptr a = 0, b = 0;
  float ms = 0;
  if ((rc = init(0)) != 0) return fail("cuInit", rc);
  if ((rc = get(&d, 0)) != 0) return fail("cuDeviceGet", rc);
  name(nm, sizeof nm, d);
  if ((rc = retain(&ctx, d)) != 0) return fail("cuDevicePrimaryCtxRetain", rc);
  if ((rc = set(ctx)) != 0) return fail("cuCtxSetCurrent", rc);
  if ((rc = alloc(&a, bytes)) != 0 || (rc = alloc(&b, bytes)) != 0) return fail("cuMemAlloc", rc);
  if ((rc = ev_create(&start, 0)) != 0 || (rc = ev_create(&stop, 0)) != 0) return fail("cuEventCreate", rc);
  for (int i = 0; i < 3; i++)
    if ((rc = dtod(b, a, bytes, NULL)) != 0) return fail("cuMemcpyDtoDAsync", rc);
  if ((rc = ev_record(start, NULL)) != 0) return fail("cuEventRecord", rc);
  for (int i = 0; i < copies; i++)
    if ((rc = dtod(b, a, bytes, NULL)) != 0) return fail("cuMemcpyDtoDAsync", rc);
  if ((rc = ev_record(stop, NULL)) != 0) return fail("cuEventRecord", rc);
  if ((rc = ev_sync(stop)) != 0) return fail("cuEventSynchronize", rc);
  if ((rc = ev_time(&ms, start, stop)) != 0) return fail("cuEventElapsedTime", rc);
  mfree(a);
  mfree(b);
  double per = ms / copies, gbs = per > 0 ? (double)bytes / per / 1e6 : 0;
  printf("copy_bytes=%zu\ncopy_ms=%.3f\ncopy_gbs=%.1f\n", bytes, per, gbs);
  char size[64];
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0)
    snprintf(size, sizeof size, "%zu GiB", bytes >> 30);
  else if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    snprintf(size, sizeof size, "%zu MiB", bytes >> 20);
  else
    snprintf(size, sizeof size, "%zu B", bytes);
  printf("OK: GPU 0 %s: %s device-to-device copy %.3f ms, %.1f GB/s (cuMemcpyDtoD, %d copies)\n", nm, size, per, gbs,
         copies);
  return 0;
}

int main(int argc, char **argv) {
  int copy = argc > 1 && !strcmp(argv[1], "copy");
  size_t bytes = copy && argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)1 << 30;
  int copies = copy && argc > 3 ? atoi(argv[3]) : 20;
  if (bytes == 0 || copies <= 0) {
    printf("error=usage: cuda-probe [copy [BYTES [COPIES]]]\n");
    return 2;
  }
  const char *libs[] = {"libcuda.so.1", "libcuda.so"};
  void *h = NULL;
  const char *which = NULL;
  char first[512] = "?";
  for (unsigned i = 0; i < sizeof libs / sizeof libs[0] && !h; i++) {
    h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    which = libs[i];
    if (!h && i == 0) {
      const char *e = dlerror();
      snprintf(first, sizeof first, "%s", e ? e : "?");
    }
  }
  if (!h) {
    printf("libcuda=none\nerror=libcuda.so.1 could not be loaded (no NVIDIA driver here?): %s\n", first);
    return 3;
  }
  printf("libcuda=%s\n", which);
  err_name = (fn_errname)dlsym(h, "cuGetErrorName");
  if (copy) return copy_bandwidth(h, bytes, copies);
  fn_int drv = (fn_int)dlsym(h, "cuDriverGetVersion");
  fn_uint init = (fn_uint)dlsym(h, "cuInit");
  fn_int count = (fn_int)dlsym(h, "cuDeviceGetCount");
  fn_dev_get get = (fn_dev_get)dlsym(h, "cuDeviceGet");
  fn_name name = (fn_name)dlsym(h, "cuDeviceGetName");
  fn_attr attr = (fn_attr)dlsym(h, "cuDeviceGetAttribute");
  if (!drv || !init || !count || !get || !name || !attr) {
    printf("error=libcuda lacks a driver API entry point (cuDriverGetVersion, cuInit, cuDeviceGet...)\n");
    return 4;
  }
  int v = 0, rc;
  if ((rc = drv(&v)) != 0) return fail("cuDriverGetVersion", rc);
  printf("driver_cuda=%d (%d.%d)\n", v, v / 1000, (v % 1000) / 10);
  fflush(stdout);
  if ((rc = init(0)) != 0) return fail("cuInit", rc);
  int n = 0;
  if ((rc = count(&n)) != 0) return fail("cuDeviceGetCount", rc);
  printf("devices=%d\n", n);
  for (int i = 0; i < n; i++) {
    int d = 0, major = 0, minor = 0, mode = -1, bus = 0, dev = 0, dom = 0;
    char nm[256] = "?";
    if ((rc = get(&d, i)) != 0) return fail("cuDeviceGet", rc);
    if ((rc = name(nm, sizeof nm, d)) != 0) return fail("cuDeviceGetName", rc);
    /* CU_DEVICE_ATTRIBUTE_: COMPUTE_CAPABILITY_MAJOR 75, _MINOR 76, COMPUTE_MODE 20,
       PCI_BUS_ID 33, PCI_DEVICE_ID 34, PCI_DOMAIN_ID 50. */
    if ((rc = attr(&major, 75, d)) != 0 || (rc = attr(&minor, 76, d)) != 0)
      return fail("cuDeviceGetAttribute(compute capability)", rc);
    if ((rc = attr(&mode, 20, d)) != 0) return fail("cuDeviceGetAttribute(COMPUTE_MODE)", rc);
    attr(&bus, 33, d);
    attr(&dev, 34, d);
    attr(&dom, 50, d);
    printf("device%d=name=%s;cc=%d.%d;compute_mode=%s;pci=%04x:%02x:%02x.0\n", i, nm, major, minor,
           mode_name(mode), dom, bus, dev);
  }
  return n > 0 ? 0 : 5;
}
