// Renders pull events on stderr: one redrawn bar with bytes, speed and ETA on a terminal; plain
// lines (start, every ~10% or 10 s, done) when stderr is a file or a pipe.
import { formatBytes } from './format-bytes.js';
import type { PullEvent } from './pull.js';

export interface ProgressSink {
  isTTY?: boolean;
  columns?: number;
  write(s: string): unknown;
}

function formatDuration(s: number): string {
  if (!Number.isFinite(s) || s < 0) return '--:--';
  const m = Math.floor(s / 60);
  const sec = Math.floor(s % 60);
  return m >= 60 ? `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m` : `${m}:${String(sec).padStart(2, '0')}`;
}

/** Returns an onProgress handler; `now` is injectable for tests. */
export function createProgressPrinter(out: ProgressSink = process.stderr, now: () => number = Date.now): (e: PullEvent) => void {
  const tty = !!out.isTTY;
  const samples: { t: number; bytes: number }[] = [];
  let lastDraw = 0;
  let lastLinePct = -1;
  let lastLineAt = 0;
  let drawn = false;
  let sessionStart = 0;

  const speed = (): number => {
    if (samples.length < 2) return 0;
    const a = samples[0];
    const b = samples[samples.length - 1];
    return b.t > a.t ? ((b.bytes - a.bytes) * 1000) / (b.t - a.t) : 0;
  };
  const clear = () => {
    if (tty && drawn) out.write('\r\x1b[2K');
    drawn = false;
  };

  return (e: PullEvent) => {
    const t = now();
    switch (e.type) {
      case 'resolved':
        out.write(`pulling ${e.repo}@${e.revision} (commit ${e.commit.slice(0, 12)})\n`);
        break;
      case 'plan': {
        const cached = e.files.filter((f) => f.cached).length;
        out.write(
          e.downloadBytes > 0
            ? `${e.files.length} files, ${formatBytes(e.totalBytes)}; ${formatBytes(e.downloadBytes)} to download${cached ? ` (${cached} already in the cache)` : ''}\n`
            : `all ${e.files.length} files already in the cache\n`,
        );
        sessionStart = t;
        break;
      }
      case 'file-start':
        if (e.resumeFrom > 0) {
          clear();
          out.write(`resuming ${e.name} at ${formatBytes(e.resumeFrom)} of ${formatBytes(e.sizeBytes)}\n`);
        }
        break;
      case 'bytes': {
        samples.push({ t, bytes: e.doneBytes });
        while (samples.length > 2 && t - samples[0].t > 5000) samples.shift();
        const pct = e.downloadBytes > 0 ? Math.min(100, (e.doneBytes / e.downloadBytes) * 100) : 100;
        const rate = speed();
        const eta = rate > 0 ? (e.downloadBytes - e.doneBytes) / rate : Number.NaN;
        if (tty) {
          if (t - lastDraw < 100 && e.fileBytes < e.fileSize) break;
          lastDraw = t;
          const cols = Math.max(40, out.columns ?? 80);
          const stats = ` ${pct.toFixed(0).padStart(3)}% ${formatBytes(e.doneBytes)}/${formatBytes(e.downloadBytes)} ${formatBytes(rate)}/s ETA ${formatDuration(eta)} `;
          const name = e.name.length > 28 ? `…${e.name.slice(-27)}` : e.name;
          const width = Math.max(10, cols - stats.length - name.length - 4);
          const fill = Math.round((pct / 100) * width);
          out.write(`\r\x1b[2K[${'='.repeat(fill)}${fill < width ? '>' : ''}${' '.repeat(Math.max(0, width - fill - 1))}]${stats}${name}`);
          drawn = true;
        } else {
          // A log line per 10% of the whole pull, or every 10 s on a slow link.
          const step = Math.floor(pct / 10);
          if ((step > lastLinePct && pct < 100) || t - lastLineAt > 10_000) {
            lastLinePct = step;
            lastLineAt = t;
            out.write(`  ${pct.toFixed(0)}% ${formatBytes(e.doneBytes)}/${formatBytes(e.downloadBytes)} at ${formatBytes(rate)}/s (${e.name})\n`);
          }
        }
        break;
      }
      case 'file-done':
        if (!tty) out.write(`  ${e.name}: done\n`);
        lastLineAt = t;
        break;
      case 'retry':
        clear();
        out.write(`  retrying in ${(e.info.delayMs / 1000).toFixed(1)} s (attempt ${e.info.attempt}): ${e.info.reason}\n`);
        break;
      case 'done': {
        clear();
        const r = e.result;
        const secs = (t - sessionStart) / 1000;
        const fetched = r.downloadedBytes;
        out.write(
          r.offline
            ? `using the cached copy (offline): ${r.dir}\n`
            : `${r.repo} ready: ${formatBytes(r.totalBytes)} in ${r.dir}` +
                (fetched > 0 && secs > 0 ? ` (downloaded ${formatBytes(fetched)} at ${formatBytes(fetched / secs)}/s)` : '') +
                '\n',
        );
        break;
      }
    }
  };
}
