/**
 * The anywidget front end of `ipy_resume.timeline()`.
 *
 * esbuild bundles this file with the same renderer and controller the side panel
 * uses into `ipy_resume/_frontend/widget.js`. The widget lives inside the kernel,
 * so it is always "live": the Python side syncs the snapshot as a trait and
 * answers `details` / `restore` / `refresh` requests sent as custom messages,
 * each answer repeating the request's id (protocol.ts).
 */

import { HostState, TimelineController } from './controller';
import { PendingRequests, Request } from './protocol';
import { TimelineRenderer } from './renderer';
import { Snapshot } from './types';

interface AnyModel {
  get(name: string): any;
  on(event: string, callback: (...args: any[]) => void): void;
  off(event?: string | null, callback?: ((...args: any[]) => void) | null): void;
  send(content: unknown): void;
}

interface RenderProps {
  model: AnyModel;
  el: HTMLElement;
}

const HOST: HostState = {
  status: 'live',
  statusText: 'Live: this widget runs in the kernel.',
  canRestore: true,
  canGoToCell: false
};

function render({ model, el }: RenderProps): () => void {
  const pending = new PendingRequests();
  const request: Request = content => pending.send(content, message => model.send(message));
  const timeline = new TimelineController({
    request,
    changed: () => view.update(timeline.state(HOST)),
    canRestore: () => true
  });

  const host = document.createElement('div');
  host.className = 'ipr-widget';
  el.append(host);
  const view = new TimelineRenderer(
    host,
    {
      select: seq => timeline.select(seq),
      restore: event => void timeline.restore(event),
      goToCell: () => undefined,
      // The kernel re-reads the store and syncs the snapshot trait.
      refresh: () =>
        void request({ request: 'refresh' }).catch((err: Error) =>
          timeline.setNotice({ kind: 'error', text: err.message })
        )
    },
    { maxListHeight: 320 }
  );

  const onMessage = (msg: unknown) => void pending.answer(msg);
  const onSnapshot = () => timeline.setSnapshot((model.get('snapshot') as Snapshot) ?? null);
  model.on('msg:custom', onMessage);
  model.on('change:snapshot', onSnapshot);
  onSnapshot();
  return () => {
    model.off('msg:custom', onMessage);
    model.off('change:snapshot', onSnapshot);
    view.dispose();
  };
}

export default { render };
