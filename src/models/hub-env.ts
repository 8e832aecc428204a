// Hugging Face environment conventions, read in one place so tests can pass their own env:
// HF_HOME / HF_HUB_CACHE (cache location), HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, and the proxy variables.
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { proxyEnv, type ProxyEnv } from '../net/dispatchers.js';

export type Env = Record<string, string | undefined>;

export interface HubEnv {
  cacheDir: string; // the hub cache: models--org--name folders live here
  endpoint: string; // no trailing slash
  token?: string;
  offline: boolean;
  /** HTTP(S)_PROXY / NO_PROXY; absent: the process env's. */
  proxy?: ProxyEnv;
}

function truthy(v: string | undefined): boolean {
  return v !== undefined && ['1', 'on', 'yes', 'true'].includes(v.trim().toLowerCase());
}

export function hfHome(env: Env = process.env): string {
  if (env.HF_HOME) return env.HF_HOME;
  const xdg = env.XDG_CACHE_HOME || join(env.HOME || homedir(), '.cache');
  return join(xdg, 'huggingface');
}

/** Same precedence as huggingface_hub: HF_HUB_CACHE, legacy HUGGINGFACE_HUB_CACHE, then $HF_HOME/hub. */
export function hubCacheDir(env: Env = process.env): string {
  return env.HF_HUB_CACHE || env.HUGGINGFACE_HUB_CACHE || join(hfHome(env), 'hub');
}

/** HF_TOKEN, else the token file `huggingface-cli login` writes ($HF_TOKEN_PATH or $HF_HOME/token). */
export function hubToken(env: Env = process.env): string | undefined {
  const t = env.HF_TOKEN || env.HUGGING_FACE_HUB_TOKEN;
  if (t) return t.trim();
  const file = env.HF_TOKEN_PATH || join(hfHome(env), 'token');
  try {
    if (existsSync(file)) {
      const v = readFileSync(file, 'utf8').trim();
      if (v) return v;
    }
  } catch {
    // an unreadable token file is the same as none
  }
  return undefined;
}

export function hubEnv(env: Env = process.env): HubEnv {
  return {
    cacheDir: hubCacheDir(env),
    endpoint: (env.HF_ENDPOINT || 'https://huggingface.co').replace(/\/+$/, ''),
    token: hubToken(env),
    offline: truthy(env.HF_HUB_OFFLINE) || truthy(env.TRANSFORMERS_OFFLINE),
    proxy: proxyEnv(env),
  };
}

/** rapid's config dir: $RAPID_CONFIG_DIR, else $XDG_CONFIG_HOME/rapid, else ~/.config/rapid. */
export function rapidConfigDir(env: Env = process.env): string {
  if (env.RAPID_CONFIG_DIR) return env.RAPID_CONFIG_DIR;
  const xdg = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(xdg, 'rapid');
}
