/*
 * A fake libnvidia-ml.so.1 for tests: the entry points gpuwatch reaches through pynvml,
 * written from the documented behaviour in nvml.h / the NVML API reference
 * (https://docs.nvidia.com/deploy/nvml-api/), plus a small control API (the fake_* functions)
 * that a test uses to script a machine: GPUs, MIG devices, sample rings, injected errors and a
 * driver that goes away.
 *
 * Where the reference leaves a behaviour open, the choice is marked ASSUMPTION.
 * Not thread-safe beyond what the tests need: pynvml calls from one sampler thread at a time.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* nvmlReturn_t values (nvml.h, enum nvmlReturn_enum). */
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9

#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_GPU_UTILIZATION_SAMPLES 1
#define NVML_DEVICE_MIG_ENABLE 1

#define NAME_SIZE 96   /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define UUID_SIZE 96   /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define BUS_ID_SIZE 32 /* NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE */
#define BUS_ID_V2_SIZE 16 /* NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE */
#define VERSION_SIZE 80 /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */

#define MAX_DEVICES 32
/* ASSUMPTION: the size of the driver's sample buffer is not documented; 100 entries. */
#define RING 100
#define MAX_FAILURES 64
#define MAX_COUNTERS 64

typedef int nvmlReturn_t;

/* Struct layouts as in nvml.h. */
typedef struct {
    char busIdLegacy[BUS_ID_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[BUS_ID_SIZE];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned long long timeStamp;
    nvmlValue_t sampleValue;
} nvmlSample_t;

typedef struct fake_device {
    int used;
    int parent;    /* -1: a GPU; otherwise the slot of the GPU this MIG device belongs to */
    unsigned int mig_index;
    char name[NAME_SIZE];
    char uuid[UUID_SIZE];
    unsigned int domain, bus, dev;
    int mig_capable; /* Ampere and newer */
    unsigned int mig_current, mig_pending, max_mig;
    unsigned long long mem_total, mem_used;
    unsigned int sm_clock_mhz;
    unsigned int util_gpu, util_memory;
    /* Power: the energy counter grows at power_mw from (energy_base_mj, energy_base_ns). */
    unsigned int power_mw;
    unsigned long long energy_base_mj;
    long long energy_base_ns;
    /* Utilization sample ring, oldest first from head. */
    unsigned long long ring_ts[RING];
    unsigned int ring_value[RING];
    int ring_head, ring_count;
    /* A live ring: the "driver" stamps a sample every period on its clock while time passes. */
    int live_clock; /* clockid_t, or -1 */
    unsigned long long live_period_us, live_next_us;
    unsigned int live_value;
    unsigned long long last_seen; /* the lastSeenTimeStamp of the latest GetSamples call */
    int driver_model;             /* nvmlDriverModel_t, or -1: not Windows */
    int cc_major, cc_minor;       /* CUDA compute capability */
} fake_device;

typedef fake_device *nvmlDevice_t;

static fake_device devices[MAX_DEVICES];
static int init_count;
static int driver_error; /* non-zero: every call returns this (the driver went away) */
static char driver_version[VERSION_SIZE] = "580.65.06";
/* What nvmlSystemGetCudaDriverVersion answers: major * 1000 + minor * 10 (580.65.06: 13.0). */
static int cuda_driver_version = 13000;

static struct {
    int slot; /* -1: every device */
    char function[64];
    int code;
} failures[MAX_FAILURES];
static int n_failures;

static struct {
    char function[64];
    long long count;
} counters[MAX_COUNTERS];
static int n_counters;

static void count_call(const char *function)
{
    for (int i = 0; i < n_counters; i++) {
        if (strcmp(counters[i].function, function) == 0) {
            counters[i].count++;
            return;
        }
    }
    if (n_counters < MAX_COUNTERS) {
        snprintf(counters[n_counters].function, sizeof counters[0].function, "%s", function);
        counters[n_counters++].count = 1;
    }
}

static long long monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int valid(nvmlDevice_t device)
{
    ptrdiff_t offset = (char *)device - (char *)devices;
    return device != NULL && offset >= 0 && offset < (ptrdiff_t)sizeof devices &&
           offset % (ptrdiff_t)sizeof(fake_device) == 0 && device->used;
}

static int injected(nvmlDevice_t device, const char *function)
{
    int slot = device == NULL ? -1 : (int)(device - devices);
    for (int i = 0; i < n_failures; i++) {
        if ((failures[i].slot == -1 || failures[i].slot == slot) &&
            strcmp(failures[i].function, function) == 0)
            return failures[i].code;
    }
    return NVML_SUCCESS;
}

/* The common prologue: count the call, then the documented UNINITIALIZED / INVALID_ARGUMENT
 * checks, a vanished driver, and whatever the test injected for this device and function. */
static int enter(const char *function, nvmlDevice_t device, int needs_device)
{
    count_call(function);
    if (driver_error)
        return driver_error;
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (needs_device && !valid(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    return injected(device, function);
}

#define ENTER(device, needs_device)                                   \
    do {                                                              \
        int rc_ = enter(__func__, (device), (needs_device));          \
        if (rc_ != NVML_SUCCESS)                                      \
            return rc_;                                               \
    } while (0)

static int is_mig(nvmlDevice_t device) { return device->parent >= 0; }

static nvmlDevice_t gpu_of(nvmlDevice_t device)
{
    return is_mig(device) ? &devices[device->parent] : device;
}

/* ---- Initialisation ------------------------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    count_call(__func__);
    if (driver_error)
        return NVML_ERROR_DRIVER_NOT_LOADED; /* "if NVIDIA driver is not running" */
    int rc = injected(NULL, __func__);
    if (rc != NVML_SUCCESS)
        return rc;
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    count_call(__func__);
    if (driver_error)
        return driver_error;
    /* "no error is reported if nvmlShutdown() is called more times than nvmlInit()" */
    if (init_count > 0)
        init_count--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    ENTER(NULL, 0);
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(driver_version) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(version, driver_version);
    return NVML_SUCCESS;
}

/* "Retrieves the version of the CUDA driver" as major * 1000 + minor * 10
 * (NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v / 1000, NVML_CUDA_DRIVER_VERSION_MINOR(v) = v % 1000 / 10). */
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    ENTER(NULL, 0);
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    ENTER(NULL, 0);
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_driver_version;
    return NVML_SUCCESS;
}

/* ---- Enumeration: physical GPUs only; MIG devices are reached through their parent ------ */

static int gpu_slot(unsigned int index)
{
    unsigned int seen = 0;
    for (int i = 0; i < MAX_DEVICES; i++) {
        if (devices[i].used && devices[i].parent < 0 && seen++ == index)
            return i;
    }
    return -1;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    ENTER(NULL, 0);
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < MAX_DEVICES; i++)
        n += devices[i].used && devices[i].parent < 0;
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    count_call(__func__);
    if (driver_error)
        return driver_error;
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    int slot = gpu_slot(index);
    if (slot < 0 || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* e.g. NVML_ERROR_NO_PERMISSION: counted by _v2 but not ours to open */
    int rc = injected(&devices[slot], __func__);
    if (rc != NVML_SUCCESS)
        return rc;
    *device = &devices[slot];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    ENTER(device, 1);
    if (name == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(device->name) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(name, device->name);
    return NVML_SUCCESS;
}

/* With a MIG handle: the MIG device's own globally unique "MIG-..." UUID (nvmlDeviceGetUUID). */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    ENTER(device, 1);
    if (uuid == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(device->uuid) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(uuid, device->uuid);
    return NVML_SUCCESS;
}

/* ASSUMPTION: a MIG handle has no PCI identity of its own (NOT_SUPPORTED); its GPU has it. */
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER(device, 1);
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(device))
        return NVML_ERROR_NOT_SUPPORTED;
    memset(pci, 0, sizeof *pci);
    pci->domain = device->domain;
    pci->bus = device->bus;
    pci->device = device->dev;
    pci->pciDeviceId = 0x20B010DE;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", device->domain,
             device->bus, device->dev);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", device->domain, device->bus,
             device->dev);
    return NVML_SUCCESS;
}

/* ---- MIG (Ampere and newer; Linux only) ---------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    ENTER(device, 1);
    if (current == NULL || pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(device) || !device->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED; /* "If device doesn't support MIG mode" */
    *current = device->mig_current;
    *pending = device->mig_pending;
    return NVML_SUCCESS;
}

/* "Returns zero if MIG is not supported or enabled." */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    ENTER(device, 1);
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    int enabled = !is_mig(device) && device->mig_capable &&
                  device->mig_current == NVML_DEVICE_MIG_ENABLE;
    *count = enabled ? device->max_mig : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *mig)
{
    ENTER(device, 1);
    if (mig == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(device) || !device->mig_capable || device->mig_current != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= device->max_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    int parent = (int)(device - devices);
    for (int i = 0; i < MAX_DEVICES; i++) {
        if (devices[i].used && devices[i].parent == parent && devices[i].mig_index == index) {
            *mig = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND; /* "if no valid MIG device was found at index" */
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig_device)
{
    ENTER(device, 1);
    if (is_mig_device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig_device = (unsigned int)is_mig(device);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device)
{
    ENTER(mig, 1);
    if (device == NULL || !is_mig(mig))
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = gpu_of(mig);
    return NVML_SUCCESS;
}

/* ---- Metrics ------------------------------------------------------------------------- */

static int mig_enabled_gpu(nvmlDevice_t device)
{
    nvmlDevice_t gpu = gpu_of(device);
    return gpu->mig_capable && gpu->mig_current == NVML_DEVICE_MIG_ENABLE;
}

/* "On MIG-enabled GPUs, querying device utilization rates is not currently supported." */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    ENTER(device, 1);
    if (utilization == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mig_enabled_gpu(device))
        return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = device->util_gpu;
    utilization->memory = device->util_memory;
    return NVML_SUCCESS;
}

static unsigned long long now_us(int clock)
{
    struct timespec ts;
    clock_gettime((clockid_t)clock, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

static void ring_push(fake_device *d, unsigned long long stamp, unsigned int value)
{
    int at = (d->ring_head + d->ring_count) % RING;
    if (d->ring_count == RING)
        d->ring_head = (d->ring_head + 1) % RING; /* full: the oldest sample is overwritten */
    else
        d->ring_count++;
    d->ring_ts[at] = stamp;
    d->ring_value[at] = value;
}

static void run_live_ring(fake_device *d)
{
    if (d->live_clock < 0 || d->live_period_us == 0)
        return;
    unsigned long long now = now_us(d->live_clock);
    while (d->live_next_us <= now) {
        ring_push(d, d->live_next_us, d->live_value);
        d->live_next_us += d->live_period_us;
    }
}

/*
 * nvmlDeviceGetSamples: samples = NULL asks for the buffer size ("the number of samples that
 * can be queried"); otherwise at most *sampleCount samples with timeStamp > lastSeenTimeStamp
 * are copied, oldest first, and *sampleCount becomes the number copied. NOT_FOUND "if sample
 * entries are not found"; utilization samples are NOT_SUPPORTED on MIG-enabled GPUs.
 * ASSUMPTION: the size query answers the buffer's capacity, and NOT_FOUND already there when
 * nothing is newer than lastSeenTimeStamp.
 */
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, int type,
                                  unsigned long long lastSeenTimeStamp, int *sampleValType,
                                  unsigned int *sampleCount, nvmlSample_t *samples)
{
    ENTER(device, 1);
    if (sampleCount == NULL || sampleValType == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (samples != NULL && *sampleCount == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (type != NVML_GPU_UTILIZATION_SAMPLES)
        return NVML_ERROR_NOT_SUPPORTED; /* the fake keeps no other sample type */
    if (mig_enabled_gpu(device))
        return NVML_ERROR_NOT_SUPPORTED;
    device->last_seen = lastSeenTimeStamp;
    run_live_ring(device);
    unsigned int newer = 0;
    for (int k = 0; k < device->ring_count; k++)
        newer += device->ring_ts[(device->ring_head + k) % RING] > lastSeenTimeStamp;
    if (newer == 0)
        return NVML_ERROR_NOT_FOUND;
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (samples == NULL) {
        *sampleCount = RING;
        return NVML_SUCCESS;
    }
    unsigned int copied = 0;
    for (int k = 0; k < device->ring_count && copied < *sampleCount; k++) {
        int at = (device->ring_head + k) % RING;
        if (device->ring_ts[at] > lastSeenTimeStamp) {
            samples[copied].timeStamp = device->ring_ts[at];
            samples[copied].sampleValue.ullVal = 0;
            samples[copied].sampleValue.uiVal = device->ring_value[at];
            copied++;
        }
    }
    *sampleCount = copied;
    return NVML_SUCCESS;
}

/* "In MIG mode, if device handle is provided, the API returns aggregate information";
 * a MIG handle gets its own instance's figures. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    ENTER(device, 1);
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = device->mem_total;
    memory->used = device->mem_used;
    memory->free = device->mem_total - device->mem_used;
    return NVML_SUCCESS;
}

/* ASSUMPTION: a MIG handle reports its GPU's clock. */
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
    ENTER(device, 1);
    if (clock == NULL || type < 0 || type > 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    *clock = gpu_of(device)->sm_clock_mhz;
    return NVML_SUCCESS;
}

static unsigned long long energy_now(fake_device *d)
{
    long long elapsed = monotonic_ns() - d->energy_base_ns;
    /* mW * ns / 1e9 = mJ */
    return d->energy_base_mj + (unsigned long long)((double)d->power_mw * (double)elapsed / 1e9);
}

/* Power in milliwatts. ASSUMPTION: power and energy are whole-board figures, NOT_SUPPORTED
 * through a MIG handle. */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    ENTER(device, 1);
    if (power == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(device))
        return NVML_ERROR_NOT_SUPPORTED;
    *power = device->power_mw;
    return NVML_SUCCESS;
}

/* Millijoules since the driver was loaded; Volta and newer (a test injects NOT_SUPPORTED for
 * older GPUs). */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    ENTER(device, 1);
    if (energy == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(device))
        return NVML_ERROR_NOT_SUPPORTED;
    *energy = energy_now(device);
    return NVML_SUCCESS;
}

/* "NVML_ERROR_NOT_SUPPORTED if the platform is not windows": driver_model -1 plays Linux. */
static nvmlReturn_t driver_model(nvmlDevice_t device, int *current, int *pending)
{
    if (current == NULL || pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->driver_model < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = device->driver_model;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, int *current, int *pending)
{
    ENTER(device, 1);
    return driver_model(device, current, pending);
}

nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t device, int *current, int *pending)
{
    ENTER(device, 1);
    return driver_model(device, current, pending);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    ENTER(device, 1);
    if (major == NULL || minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlDevice_t gpu = gpu_of(device); /* a MIG device has its GPU's architecture */
    *major = gpu->cc_major;
    *minor = gpu->cc_minor;
    return NVML_SUCCESS;
}

/* ---- Control API for tests ----------------------------------------------------------- */

void fake_reset(void)
{
    memset(devices, 0, sizeof devices);
    init_count = 0;
    driver_error = 0;
    n_failures = 0;
    n_counters = 0;
    cuda_driver_version = 13000;
}

static int new_slot(void)
{
    for (int i = 0; i < MAX_DEVICES; i++) {
        if (!devices[i].used) {
            memset(&devices[i], 0, sizeof devices[i]);
            devices[i].used = 1;
            devices[i].parent = -1;
            devices[i].live_clock = -1;
            devices[i].driver_model = -1;
            devices[i].energy_base_ns = monotonic_ns();
            devices[i].cc_major = 8; /* an A100's 8.0 unless the test says otherwise */
            devices[i].cc_minor = 0;
            return i;
        }
    }
    return -1;
}

/* A GPU; NVML orders GPUs by PCI bus id, so tests add them in that order. */
int fake_add_gpu(const char *name, const char *uuid, unsigned int domain, unsigned int bus,
                 unsigned int dev, int mig_capable)
{
    int slot = new_slot();
    if (slot < 0)
        return -1;
    fake_device *d = &devices[slot];
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->uuid, sizeof d->uuid, "%s", uuid);
    d->domain = domain;
    d->bus = bus;
    d->dev = dev;
    d->mig_capable = mig_capable;
    d->mem_total = 8ULL << 30;
    return slot;
}

int fake_add_mig(int parent, unsigned int mig_index, const char *uuid, const char *name)
{
    if (parent < 0 || parent >= MAX_DEVICES || !devices[parent].used)
        return -1;
    int slot = new_slot();
    if (slot < 0)
        return -1;
    fake_device *d = &devices[slot];
    d->parent = parent;
    d->mig_index = mig_index;
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->uuid, sizeof d->uuid, "%s", uuid);
    d->mem_total = 5ULL << 30;
    return slot;
}

void fake_set_mig_mode(int slot, unsigned int current, unsigned int pending, unsigned int max)
{
    devices[slot].mig_current = current;
    devices[slot].mig_pending = pending;
    devices[slot].max_mig = max;
}

void fake_set_memory(int slot, unsigned long long total, unsigned long long used)
{
    devices[slot].mem_total = total;
    devices[slot].mem_used = used;
}

void fake_set_clock(int slot, unsigned int mhz) { devices[slot].sm_clock_mhz = mhz; }

void fake_set_utilization(int slot, unsigned int gpu, unsigned int memory)
{
    devices[slot].util_gpu = gpu;
    devices[slot].util_memory = memory;
}

/* The energy counter keeps what it counted so far and grows at the new power from now on. */
void fake_set_power(int slot, unsigned int milliwatts)
{
    fake_device *d = &devices[slot];
    d->energy_base_mj = energy_now(d);
    d->energy_base_ns = monotonic_ns();
    d->power_mw = milliwatts;
}

void fake_push_sample(int slot, unsigned long long stamp_us, unsigned int value)
{
    ring_push(&devices[slot], stamp_us, value);
}

/* From now on the driver stamps a sample of `value` every period_us on `clock` (a clockid_t:
 * CLOCK_REALTIME for epoch stamps, CLOCK_BOOTTIME for stamps since boot); the first one is
 * stamped `first_us`. clock = -1 stops it. */
void fake_set_live_samples(int slot, int clock, unsigned long long first_us,
                           unsigned long long period_us, unsigned int value)
{
    fake_device *d = &devices[slot];
    d->live_clock = clock;
    d->live_next_us = first_us;
    d->live_period_us = period_us;
    d->live_value = value;
}

void fake_set_live_value(int slot, unsigned int value) { devices[slot].live_value = value; }

/* `function` answers `code` for device `slot` (-1: every device); code 0 removes the rule. */
void fake_fail(int slot, const char *function, int code)
{
    for (int i = 0; i < n_failures; i++) {
        if (failures[i].slot == slot && strcmp(failures[i].function, function) == 0) {
            if (code == NVML_SUCCESS)
                failures[i] = failures[--n_failures];
            else
                failures[i].code = code;
            return;
        }
    }
    if (code != NVML_SUCCESS && n_failures < MAX_FAILURES) {
        failures[n_failures].slot = slot;
        snprintf(failures[n_failures].function, sizeof failures[0].function, "%s", function);
        failures[n_failures++].code = code;
    }
}

/* The driver goes away: from now on every call answers `code` (nvmlInit: DRIVER_NOT_LOADED). */
void fake_remove_driver(int code) { driver_error = code; }

long long fake_calls(const char *function)
{
    for (int i = 0; i < n_counters; i++) {
        if (strcmp(counters[i].function, function) == 0)
            return counters[i].count;
    }
    return 0;
}

long long fake_total_calls(void)
{
    long long total = 0;
    for (int i = 0; i < n_counters; i++)
        total += counters[i].count;
    return total;
}

void fake_set_driver_model(int slot, int model) { devices[slot].driver_model = model; }

unsigned long long fake_last_seen(int slot) { return devices[slot].last_seen; }

int fake_init_count(void) { return init_count; }

void fake_set_capability(int slot, int major, int minor)
{
    devices[slot].cc_major = major;
    devices[slot].cc_minor = minor;
}

/* The newest CUDA the driver supports, as nvmlSystemGetCudaDriverVersion spells it (12080: 12.8). */
void fake_set_cuda_driver_version(int version) { cuda_driver_version = version; }
