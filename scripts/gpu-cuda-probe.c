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
 */
#include <dlfcn.h>
#include <stdio.h>

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

int main(void) {
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
