/* A stand-in libamdhip64.so for the test suite: implements the HIP entry points sage_co's gpu backend calls,
 * records every call, and never touches a GPU.
 *
 * It is called through the real hip-python (whose Cython wrappers dlopen it as "libamdhip64") and through sage-co's
 * ctypes binding, so the tests check exactly the bytes and values each binding hands to the runtime: code-object bytes (hipModuleLoadData),
 * function names, kernarg buffer bytes and size (hipModuleLaunchKernel's `extra` config), grid, block,
 * shared memory, stream, and the device current at each call. Tests read the records through the stub_*
 * functions below (ctypes), make a chosen entry point fail, or mark a stream as capturing.
 *
 * Behaviour borrowed from HIP (docs/rdna4.md §HIP runtime): a module belongs to the device current when it
 * was loaded, and launching its function with another device current fails with hipErrorInvalidDevice;
 * loading a module while a stream captures fails with hipErrorStreamCaptureUnsupported. Error strings are
 * the stub's own ("stub: ..."), not HIP's.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

typedef int hipError_t;
enum {
    hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorInvalidDevice = 101, hipErrorInvalidImage = 200,
    hipErrorInvalidHandle = 400, hipErrorNotFound = 500, hipErrorNotReady = 600, hipErrorStreamCaptureUnsupported = 900,
};
enum { PARAM_BUFFER_POINTER = 1, PARAM_BUFFER_SIZE = 2, PARAM_END = 3 };
enum { REC_LOAD = 1, REC_GET_FUNCTION = 2, REC_LAUNCH = 3, REC_SET_DEVICE = 4, REC_UNLOAD = 5, REC_SYNC = 6 };

#define MAX_RECORDS 65536
#define MAX_MODULES 256
#define MAX_FUNCTIONS 1024
#define MAX_STREAMS 16

typedef struct {            /* mirrored by tests/stub_hip/__init__.py StubRecord */
    int32_t kind;
    int32_t device;         /* device current at the call */
    int32_t result;         /* hipError_t returned */
    int32_t kernel_params_null;
    uint64_t module;
    uint64_t function;
    uint64_t stream;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_mem;
    uint32_t pad;
    char name[256];
    uint64_t nbytes;        /* code-object or kernarg bytes */
    uint8_t *bytes;
} stub_record;

typedef struct { int device; uint8_t *image; size_t size; int live; } stub_module;
typedef struct { int module; char name[256]; } stub_function;

static stub_record records[MAX_RECORDS];
static int n_records = 0;
static int recording = 1;   /* 0: calls are checked but not recorded (the host-overhead benchmark) */
static stub_record scratch;
static stub_module modules[MAX_MODULES];
static int n_modules = 0;
static stub_function functions[MAX_FUNCTIONS];
static int n_functions = 0;
static double clock_ms = 0;   /* the events' clock: the stub's milliseconds of the successful launches so far */
#define MAX_COSTS 64
static char cost_name[MAX_COSTS][256];
static double cost_ms[MAX_COSTS];
static int n_costs = 0;

/* The stub's duration of one launch of kernel `name`: 1 ms unless stub_set_kernel_ms gave it another. */
static double kernel_ms(const char *name) {
    for (int i = 0; i < n_costs; i++) if (strcmp(cost_name[i], name) == 0) return cost_ms[i];
    return 1.0;
}
static int current_device = 0;
static int device_count = 1;
static uint64_t capturing[MAX_STREAMS];
static char fail_entry[64];
static int fail_code = 0, fail_times = 0;

static stub_record *new_record(int kind) {
    if (!recording) {
        free(scratch.bytes);
        memset(&scratch, 0, sizeof scratch);
        scratch.kind = kind;
        scratch.device = current_device;
        return &scratch;
    }
    if (n_records == MAX_RECORDS) { fprintf(stderr, "stub_amdhip64: record buffer full\n"); abort(); }
    stub_record *r = &records[n_records++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->device = current_device;
    return r;
}

static int injected(const char *entry) {
    if (fail_times > 0 && strcmp(entry, fail_entry) == 0) { fail_times--; return fail_code; }
    return 0;
}

static uint8_t *copy(const void *src, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    if (n) memcpy(p, src, n);
    return p;
}

/* ELF64 size from the header: the section header table ends the file the linker writes. */
static size_t elf_size(const uint8_t *img) {
    if (memcmp(img, "\x7f" "ELF", 4) != 0 || img[4] != 2) return 0;
    uint64_t shoff; uint16_t shentsize, shnum;
    memcpy(&shoff, img + 0x28, 8); memcpy(&shentsize, img + 0x3A, 2); memcpy(&shnum, img + 0x3C, 2);
    return (size_t)(shoff + (uint64_t)shentsize * shnum);
}

static int contains(const uint8_t *hay, size_t n, const char *needle, size_t m) {
    for (size_t i = 0; i + m <= n; i++) if (memcmp(hay + i, needle, m) == 0) return 1;
    return 0;
}

/* ------------------------------------------------------------------ the HIP entry points */
hipError_t hipSetDevice(int device) {
    stub_record *r = new_record(REC_SET_DEVICE);
    int e = injected("hipSetDevice");
    if (!e && (device < 0 || device >= device_count)) e = hipErrorInvalidDevice;
    if (!e) current_device = device;
    r->device = device;
    return r->result = e;
}

hipError_t hipGetDevice(int *device) { *device = current_device; return hipSuccess; }
hipError_t hipGetDeviceCount(int *count) { *count = device_count; return injected("hipGetDeviceCount"); }
hipError_t hipRuntimeGetVersion(int *version) { *version = 70253211; return hipSuccess; }
hipError_t hipDriverGetVersion(int *version) { *version = 70253211; return hipSuccess; }

/* hipDeviceProp_tR0600 (HIP >= 6: hipGetDeviceProperties is a macro for hipGetDevicePropertiesR0600): the stub fills
 * the fields sage-co reads, at their offsets in the 1472-byte struct (sage_co/backends/hip_bindings.py
 * DEVICE_PROP_OFFSETS, checked against hip-python's hipDeviceProp_t by tests/ops/test_hip_bindings.py), and zeroes
 * the rest. Per device: a name, a gcnArchName and a CU count (stub_set_device_props). */
#define MAX_DEVICES 8
#define PROP_SIZE 1472
#define PROP_CUS 388
#define PROP_ARCH 1160
static char device_name[MAX_DEVICES][256];
static char device_arch[MAX_DEVICES][256];
static int device_cus[MAX_DEVICES];

hipError_t hipGetDevicePropertiesR0600(void *prop, int device) {
    if (device < 0 || device >= device_count || device >= MAX_DEVICES) return hipErrorInvalidDevice;
    int e = injected("hipGetDeviceProperties");
    if (e) return e;
    uint8_t *p = prop;
    memset(p, 0, PROP_SIZE);
    strncpy((char *)p, device_name[device][0] ? device_name[device] : "AMD Radeon AI PRO R9700 (stub)", 255);
    int cus = device_cus[device] ? device_cus[device] : 64;
    memcpy(p + PROP_CUS, &cus, sizeof cus);
    strncpy((char *)p + PROP_ARCH, device_arch[device][0] ? device_arch[device] : "gfx1201", 255);
    return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) {
    stub_record *r = new_record(REC_SYNC);
    return r->result = injected("hipDeviceSynchronize");
}

hipError_t hipStreamIsCapturing(void *stream, int *status) {
    *status = 0;
    for (int i = 0; i < MAX_STREAMS; i++) if (capturing[i] && capturing[i] == (uint64_t)stream) *status = 1;
    return hipSuccess;
}

hipError_t hipModuleLoadData(void **module, const void *image) {
    stub_record *r = new_record(REC_LOAD);
    int e = injected("hipModuleLoadData");
    for (int i = 0; i < MAX_STREAMS && !e; i++) if (capturing[i]) e = hipErrorStreamCaptureUnsupported;
    size_t size = (!e && image) ? elf_size(image) : 0;
    if (!e && size == 0) e = hipErrorInvalidImage;
    if (!e && n_modules == MAX_MODULES) e = hipErrorInvalidValue;
    if (!e) {
        stub_module *m = &modules[n_modules];
        m->device = current_device; m->image = copy(image, size); m->size = size; m->live = 1;
        *module = (void *)(uintptr_t)(0x1000 + n_modules++);
        r->module = (uint64_t)(uintptr_t)*module;
        r->nbytes = size; r->bytes = copy(image, size);
    }
    return r->result = e;
}

static stub_module *module_of(void *handle) {
    uintptr_t i = (uintptr_t)handle - 0x1000;
    return (i < (uintptr_t)n_modules && modules[i].live) ? &modules[i] : NULL;
}

hipError_t hipModuleUnload(void *module) {
    stub_record *r = new_record(REC_UNLOAD);
    stub_module *m = module_of(module);
    r->module = (uint64_t)(uintptr_t)module;
    if (!m) return r->result = hipErrorInvalidHandle;
    m->live = 0;
    return r->result = hipSuccess;
}

hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
    stub_record *r = new_record(REC_GET_FUNCTION);
    strncpy(r->name, name, sizeof r->name - 1);
    r->module = (uint64_t)(uintptr_t)module;
    int e = injected("hipModuleGetFunction");
    stub_module *m = module_of(module);
    if (!e && !m) e = hipErrorInvalidHandle;
    if (!e) {   /* the kernel descriptor symbol "<name>.kd" must be in the image's string table */
        char kd[300];
        snprintf(kd, sizeof kd, "%s.kd", name);
        if (!contains(m->image, m->size, kd, strlen(kd) + 1)) e = hipErrorNotFound;
    }
    if (!e && n_functions == MAX_FUNCTIONS) e = hipErrorInvalidValue;
    if (!e) {
        functions[n_functions].module = (int)((uintptr_t)module - 0x1000);
        strncpy(functions[n_functions].name, name, sizeof functions[0].name - 1);
        *function = (void *)(uintptr_t)(0x100000 + n_functions++);
        r->function = (uint64_t)(uintptr_t)*function;
    }
    return r->result = e;
}

hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shared, void *stream, void **kernel_params, void **extra) {
    stub_record *r = new_record(REC_LAUNCH);
    r->function = (uint64_t)(uintptr_t)f; r->stream = (uint64_t)(uintptr_t)stream;
    r->grid[0] = gx; r->grid[1] = gy; r->grid[2] = gz; r->block[0] = bx; r->block[1] = by; r->block[2] = bz;
    r->shared_mem = shared; r->kernel_params_null = kernel_params == NULL;
    int e = injected("hipModuleLaunchKernel");
    uintptr_t fi = (uintptr_t)f - 0x100000;
    if (!e && fi >= (uintptr_t)n_functions) e = hipErrorInvalidHandle;
    if (!e) {
        stub_function *fn = &functions[fi];
        strncpy(r->name, fn->name, sizeof r->name - 1);
        r->module = 0x1000 + fn->module;
        if (!modules[fn->module].live) e = hipErrorInvalidHandle;
        else if (modules[fn->module].device != current_device) e = hipErrorInvalidDevice;
    }
    /* extra = {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}; kernelParams must be NULL with it */
    if (!e && (!extra || kernel_params)) e = hipErrorInvalidValue;
    if (!e && ((uintptr_t)extra[0] != PARAM_BUFFER_POINTER || (uintptr_t)extra[2] != PARAM_BUFFER_SIZE ||
               (uintptr_t)extra[4] != PARAM_END || !extra[1] || !extra[3])) e = hipErrorInvalidValue;
    if (!e) {
        size_t n = *(size_t *)extra[3];
        r->nbytes = n; r->bytes = copy(extra[1], n);
        clock_ms += kernel_ms(functions[fi].name);
    }
    return r->result = e;
}

/* Events: a handle per hipEventCreate; hipEventRecord stamps the event with the stub's clock (the sum of the
 * durations of the launches so far: 1 ms each unless stub_set_kernel_ms says otherwise; it runs no kernel), and
 * hipEventElapsedTime reports the difference of two stamps in milliseconds, so a test sees a float out-parameter
 * that depends on what was launched between. */
#define MAX_EVENTS 1024
static double event_stamp[MAX_EVENTS];
static int n_events = 0;

static int event_index(void *event) {
    uintptr_t i = (uintptr_t)event - 0x200000;
    return (i < (uintptr_t)n_events && event_stamp[i] != -2) ? (int)i : -1;
}

hipError_t hipEventCreate(void **event) {
    if (n_events == MAX_EVENTS) return hipErrorInvalidValue;
    event_stamp[n_events] = -1;   /* created, never recorded */
    *event = (void *)(uintptr_t)(0x200000 + n_events++);
    return hipSuccess;
}

hipError_t hipEventRecord(void *event, void *stream) {
    int i = event_index(event);
    if (i < 0) return hipErrorInvalidHandle;
    event_stamp[i] = clock_ms;
    return hipSuccess;
}

hipError_t hipEventSynchronize(void *event) {
    stub_record *r = new_record(REC_SYNC);
    int i = event_index(event);
    return r->result = i < 0 ? hipErrorInvalidHandle : injected("hipEventSynchronize");
}

hipError_t hipEventElapsedTime(float *ms, void *start, void *stop) {
    int a = event_index(start), b = event_index(stop);
    if (a < 0 || b < 0) return hipErrorInvalidHandle;
    if (event_stamp[a] < 0 || event_stamp[b] < 0) return hipErrorNotReady;
    *ms = (float)(event_stamp[b] - event_stamp[a]);
    return hipSuccess;
}

hipError_t hipEventDestroy(void *event) {
    int i = event_index(event);
    if (i < 0) return hipErrorInvalidHandle;
    event_stamp[i] = -2;
    return hipSuccess;
}

const char *hipGetErrorName(hipError_t e) {
    static char buf[64];
    snprintf(buf, sizeof buf, "stub error %d", e);
    return buf;
}

const char *hipGetErrorString(hipError_t e) {
    static char buf[96];
    snprintf(buf, sizeof buf, "stub: error string for code %d", e);
    return buf;
}

/* ------------------------------------------------------------------ test controls */
int stub_count(void) { return n_records; }
const stub_record *stub_get(int i) { return (i >= 0 && i < n_records) ? &records[i] : NULL; }
void stub_clear(void) {
    for (int i = 0; i < n_records; i++) free(records[i].bytes);
    n_records = 0;
}
void stub_set_recording(int on) { recording = on; }
void stub_set_device_count(int n) { device_count = n; }
void stub_set_device_props(int device, const char *name, const char *arch, int cus) {
    if (device < 0 || device >= MAX_DEVICES) return;
    strncpy(device_name[device], name, 255); strncpy(device_arch[device], arch, 255); device_cus[device] = cus;
}
void stub_set_kernel_ms(const char *name, double ms) {
    for (int i = 0; i < n_costs; i++) if (strcmp(cost_name[i], name) == 0) { cost_ms[i] = ms; return; }
    if (n_costs == MAX_COSTS) return;
    strncpy(cost_name[n_costs], name, 255); cost_ms[n_costs++] = ms;
}
void stub_fail(const char *entry, int code, int times) {
    strncpy(fail_entry, entry, sizeof fail_entry - 1); fail_code = code; fail_times = times;
}
void stub_set_capturing(uint64_t stream, int on) {
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (on && capturing[i] == 0) { capturing[i] = stream; return; }
        if (!on && capturing[i] == stream) capturing[i] = 0;
    }
}
