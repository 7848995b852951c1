/**
 * ipy_resume's JupyterLab extension: a side panel with the checkpoint timeline
 * of the current notebook.
 */

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';

import { CellBadges } from './badges';
import { TimelineModel } from './model';
import { TimelinePanel } from './panel';
import { ITimelineModel, PANEL_ID, PLUGIN_ID } from './tokens';

export { TimelineRenderer } from './renderer';
export * from './tokens';
export * from './types';

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <rect x="2" y="11" width="20" height="2" rx="1"/>
    <circle cx="6" cy="12" r="3"/>
    <circle cx="13" cy="12" r="2"/>
    <circle cx="19" cy="12" r="2.5"/>
  </g>
</svg>`;

export const timelineIcon = new LabIcon({ name: 'ipy-resume:timeline', svgstr: ICON_SVG });

const plugin: JupyterFrontEndPlugin<ITimelineModel> = {
  id: PLUGIN_ID,
  description: 'Checkpoint timeline of the current notebook (ipy_resume).',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ILayoutRestorer],
  provides: ITimelineModel,
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    restorer: ILayoutRestorer | null
  ): ITimelineModel => {
    const model = new TimelineModel();
    const panel = new TimelinePanel(model);
    panel.id = PANEL_ID;
    panel.title.icon = timelineIcon;
    panel.title.caption = 'Checkpoint timeline (ipy_resume)';
    // The right area exists in JupyterLab and Notebook 7; the left one is busier.
    app.shell.add(panel, 'right', { rank: 600 });
    restorer?.add(panel, PANEL_ID);

    tracker.currentChanged.connect((_, current) => model.setNotebook(current));
    model.setNotebook(tracker.currentWidget);

    // Badges on %%checkpoint cells, in place of the kernel's status lines.
    new CellBadges(tracker, model, () => app.shell.activateById(PANEL_ID));

    app.commands.addCommand('ipy-resume:open-timeline', {
      label: 'Show Checkpoint Timeline',
      execute: () => app.shell.activateById(PANEL_ID)
    });
    return model;
  }
};

export default plugin;
