// src/doctor: environment checks behind `rapid doctor`.
export { runDoctor, type DoctorOptions } from './run-doctor.js';
export { formatReport } from './format-report.js';
export { probeNative, type NativeProbe } from './native-probe.js';
export type { CheckResult, CheckStatus, DoctorReport } from './types.js';
