// Worker-thread side of the preprocessing pool: runs prepareWithSpec on the images the pool sends and
// posts the pixel rows back (their buffer transferred, not copied).

import { parentPort } from 'node:worker_threads';

import { InvalidRequestError } from '../errors/request-errors.js';
import { prepareWithSpec } from './prepare-image.js';
import type { PreprocessReply, PreprocessRequest } from './preprocess-protocol.js';

const port = parentPort;
if (port === null) throw new Error('preprocess-worker.js must run as a worker thread');

port.on('message', (msg: PreprocessRequest) => {
  let reply: PreprocessReply;
  try {
    const result = prepareWithSpec(msg.spec, msg.image, msg.options);
    reply = { id: msg.id, ok: true, result };
    port.postMessage(reply, [result.input.pixels.buffer as ArrayBuffer]);
    return;
  } catch (err) {
    const invalid = err instanceof InvalidRequestError;
    reply = {
      id: msg.id,
      ok: false,
      error: { invalid, message: err instanceof Error ? err.message : String(err), param: invalid ? err.param : undefined },
    };
  }
  port.postMessage(reply);
});
