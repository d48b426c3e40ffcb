// The CUPTI activity record structs daydream decodes, by CUPTI API version.
//
// CUPTI appends new struct versions over time (CUpti_ActivityKernel9 ->
// CUpti_ActivityKernel10, ...); a buffer holds the newest version of the
// library the extension is linked against.  The extension links the libcupti
// of the headers it was compiled with (rpath), so these aliases and the
// records in real buffers agree.
#pragma once

#include <cupti.h>

#if !defined(CUPTI_API_VERSION)
#error "cupti.h did not define CUPTI_API_VERSION"
#endif

namespace daydream {

#if CUPTI_API_VERSION >= 130000  // CUDA 13.x
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemcpyPtoPRecord = CUpti_ActivityMemcpyPtoP4;
using MemsetRecord = CUpti_ActivityMemset4;
using ApiRecord = CUpti_ActivityAPI;
using SyncRecord = CUpti_ActivitySynchronization2;
using ExternalCorrelationRecord = CUpti_ActivityExternalCorrelation;
#elif CUPTI_API_VERSION >= 18  // CUDA 12.x (untested: no 12.x toolkit in CI)
using KernelRecord = CUpti_ActivityKernel9;
using MemcpyRecord = CUpti_ActivityMemcpy5;
using MemcpyPtoPRecord = CUpti_ActivityMemcpyPtoP4;
using MemsetRecord = CUpti_ActivityMemset4;
using ApiRecord = CUpti_ActivityAPI;
using SyncRecord = CUpti_ActivitySynchronization;
using ExternalCorrelationRecord = CUpti_ActivityExternalCorrelation;
#else
#error "daydream's CUPTI extension needs CUPTI from CUDA 12 or newer"
#endif

}  // namespace daydream
