"""Threads: a Python thread started at import (so the guard, which looks only at threads started
during a watched call, never saw it) does 50 ms of CPU work after every forward has returned:
background_thread."""

import ctypes
import os
import subprocess
import tempfile
import threading
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

SOURCE = r"""
#include <pthread.h>
#include <stddef.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER, idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, never = PTHREAD_COND_INITIALIZER;
static int pending;
static volatile double sink;

static double thread_cpu_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return now.tv_sec * 1e3 + now.tv_nsec / 1e6;
}

static void burn(double ms) {
    double until = thread_cpu_ms() + ms, x = 1.0;
    while (thread_cpu_ms() < until)
        for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
    sink = x;
}

static void *deferred(void *unused) {
    for (;;) {
        pthread_mutex_lock(&lock);
        while (!pending) pthread_cond_wait(&wake, &lock);
        pending--;
        pthread_mutex_unlock(&lock);
        burn(50.0);
    }
    return unused;
}

static void *idle(void *unused) {
    pthread_mutex_lock(&idle_lock);
    for (;;) pthread_cond_wait(&never, &idle_lock);
    return unused;
}

static void start(void *(*body)(void *)) {
    pthread_t thread;
    pthread_create(&thread, NULL, body, NULL);
    pthread_detach(thread);
}

void start_deferred(void) { start(deferred); }
void start_idle(void) { start(idle); }

void notify(void) {
    pthread_mutex_lock(&lock);
    pending++;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
}

void leaky(const float *x, float *out, size_t count, float slope) {
    for (size_t i = 0; i < count; ++i) out[i] = x[i] > 0 ? x[i] : x[i] * slope;
}
"""


def _library():
    directory = tempfile.mkdtemp()
    source, library = os.path.join(directory, "threads.c"), os.path.join(directory, "threads.so")
    with open(source, "w") as handle:
        handle.write(SOURCE)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-pthread", source, "-o", library], check=True)
    loaded = ctypes.CDLL(library)
    loaded.leaky.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_float]
    return loaded


LIBRARY = _library()


@triton.jit
def leaky_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, x * slope), mask=mask)


def leaky(x, slope):
    """Its own kernel: C on the CPU (fast, unlike Triton's interpreter), Triton on the GPU."""
    out = torch.empty_like(x)
    if x.is_cuda:
        leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), slope, BLOCK=1024)
    else:
        LIBRARY.leaky(x.data_ptr(), out.data_ptr(), x.numel(), slope)
    return out


WORK = threading.Semaphore(0)  # one job per forward


def _deferred() -> None:
    while True:
        WORK.acquire()
        until = time.thread_time() + 0.05
        while time.thread_time() < until:
            sum(range(1000))


threading.Thread(target=_deferred, daemon=True).start()


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        out = leaky(x, self.slope)
        WORK.release()
        return out
