// src/doctor/coherence: the golden-set coherence gate behind `rapid doctor --coherence`.
export { checkOutput, garbage, normalize, type CheckResult } from './check-output.js';
export { loadGoldenSet, type GoldenItem, type GoldenSet } from './golden-set.js';
export { runCoherenceGate, scoreOutputs, type CoherenceOptions, type CoherenceReport, type GateRun, type ItemResult } from './run-gate.js';
export { formatCoherence } from './format-coherence.js';
