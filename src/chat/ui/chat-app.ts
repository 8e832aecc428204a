// The `rapid chat` screen: the transcript (printed once, it scrolls like any terminal output), the
// streaming reply, the input line and the status line. Ctrl-C stops a reply; twice at the prompt exits.
import { createElement as h, useCallback, useRef, useState, type ReactElement } from 'react';
import { Box, Static, useApp, useInput } from 'ink';
import type { ChatSession } from '../chat-session.js';
import { PromptLine } from './prompt-line.js';
import { ReplyView } from './reply-view.js';
import { StatusLine } from './status-line.js';
import { TranscriptEntry, type Entry } from './transcript-entry.js';

export interface ChatAppProps {
  session: ChatSession;
  maxTokens: number;
  temperature?: number;
  /** Lines shown first (the model and how to get help). */
  greeting: string;
}

export function ChatApp({ session, maxTokens, temperature, greeting }: ChatAppProps): ReactElement {
  const { exit } = useApp();
  const nextId = useRef(1);
  const [entries, setEntries] = useState<Entry[]>([{ id: 0, kind: 'notice', text: greeting }]);
  const [input, setInput] = useState('');
  const [reply, setReply] = useState<string | null>(null);
  const [hint, setHint] = useState<string | null>(null);
  const [speed, setSpeed] = useState<number | null>(null);
  const [, redraw] = useState(0);
  const abort = useRef<AbortController | null>(null);
  const armed = useRef(false); // a Ctrl-C at the prompt arms the exit; the next one exits

  const add = useCallback((e: Omit<Entry, 'id'>) => setEntries((list) => [...list, { ...e, id: nextId.current++ }]), []);

  const send = useCallback(
    async (text: string) => {
      const { user, turns } = session.withMessage(text);
      add({ kind: 'user', text, note: user.images ? `[${user.images.length} image${user.images.length > 1 ? 's' : ''}]` : undefined });
      const ac = new AbortController();
      abort.current = ac;
      setReply('');
      let out = '';
      let finish = 'abort';
      let used: number | null = null;
      try {
        for await (const ev of session.backend.reply(turns, { signal: ac.signal, maxTokens, temperature, schema: session.schema?.value })) {
          if (ev.type === 'delta') {
            out += ev.text;
            setReply(out);
          } else {
            finish = ev.finishReason;
            setSpeed(ev.tokensPerSecond);
            used = ev.promptTokens + ev.completionTokens;
          }
        }
        if (ac.signal.aborted) finish = 'abort';
        session.commit(user, out, used);
        add({ kind: 'assistant', text: out, note: finish === 'abort' ? '[stopped]' : finish === 'length' ? '[cut at the token limit]' : undefined });
      } catch (err) {
        // The message is not kept: the conversation stays as it was before it.
        add({ kind: 'error', text: (err as Error).message });
      } finally {
        abort.current = null;
        setReply(null);
        redraw((n) => n + 1);
      }
    },
    [session, maxTokens, temperature, add],
  );

  const submit = (line: string) => {
    if (abort.current) {
      setInput(line); // a reply is streaming: keep the line for when it ends
      return;
    }
    setInput('');
    if (line.trim() === '') return;
    const action = session.handle(line);
    if (action.kind === 'quit') return exit();
    if (action.kind === 'send') void send(action.text);
    else add({ kind: action.kind, text: action.text });
    redraw((n) => n + 1);
  };

  useInput((ch, key) => {
    if (key.ctrl && ch === 'c') {
      if (abort.current) {
        abort.current.abort();
        return;
      }
      if (armed.current || input === '') {
        if (armed.current) return exit();
        armed.current = true;
        setHint('Ctrl-C again to quit');
        return;
      }
      setInput('');
      return;
    }
    armed.current = false;
    setHint(null);
    if (key.ctrl && ch === 'd' && input === '' && !abort.current) return exit();
    if (key.return) return submit(input);
    if (key.backspace || key.delete) {
      setInput((v) => v.slice(0, -1));
      return;
    }
    if (key.ctrl || key.meta || key.escape || key.upArrow || key.downArrow || key.leftArrow || key.rightArrow || key.tab) return;
    // Fast typing or a paste can arrive in one piece with the Enter: a final line break sends,
    // inner ones become spaces.
    if (/[\r\n]$/.test(ch)) return submit(input + ch.replace(/[\r\n]+$/, '').replace(/[\r\n]+/g, ' '));
    if (ch) setInput((v) => v + ch.replace(/[\r\n]+/g, ' '));
  });

  const busy = reply !== null;
  return h(
    Box,
    { flexDirection: 'column' },
    h(Static, { items: entries, children: (e: unknown) => h(TranscriptEntry, { key: (e as Entry).id, entry: e as Entry }) }),
    busy ? h(ReplyView, { text: reply }) : null,
    h(Box, { marginTop: 1 }, h(PromptLine, { value: input, busy })),
    h(StatusLine, {
      s: {
        model: session.backend.model,
        busy,
        tokensPerSecond: speed,
        contextUsed: session.contextUsed,
        contextLength: session.backend.contextLength,
        schema: session.schema?.file ?? null,
        images: session.pendingImages.length,
        hint,
      },
    }),
  );
}
