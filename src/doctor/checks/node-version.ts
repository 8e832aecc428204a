// Node.js: rapid needs Node 20+ (Node-API 9, global fetch, fs.statfs).
import type { CheckResult } from '../types.js';

export const MIN_NODE_MAJOR = 20;

export function checkNodeVersion(version = process.versions.node, napi = process.versions.napi): CheckResult {
  const major = Number(version.split('.')[0]);
  const base = { id: 'node', title: 'Node.js', details: { version, napi, execPath: process.execPath } };
  if (major < MIN_NODE_MAJOR) {
    return { ...base, status: 'fail', finding: `Node ${version} is too old (rapid needs ${MIN_NODE_MAJOR} or newer)`, fix: `install Node ${MIN_NODE_MAJOR} LTS or newer (e.g. \`nvm install 20\`)` };
  }
  return { ...base, status: 'ok', finding: `Node ${version} (Node-API ${napi ?? '?'})` };
}
