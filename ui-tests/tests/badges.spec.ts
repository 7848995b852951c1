/**
 * Cell badges in place of the kernel's status lines, a clean notebook file, and
 * Plan Run All. With IPY_RESUME_DOCS_DIR set, the pictures are written there.
 */

import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { Locator, TestInfo } from '@playwright/test';
import * as fs from 'fs';
import * as path from 'path';

const PANEL = '#ipy-resume-timeline';

async function shot(target: Locator, testInfo: TestInfo, name: string, docs = false): Promise<void> {
  const file = testInfo.outputPath(name);
  await target.screenshot({ path: file });
  await testInfo.attach(name, { path: file, contentType: 'image/png' });
  const docsDir = process.env.IPY_RESUME_DOCS_DIR;
  if (docs && docsDir) {
    fs.mkdirSync(docsDir, { recursive: true });
    fs.copyFileSync(file, path.join(docsDir, name));
  }
}

function badge(page: IJupyterLabPageFixture, index: number): Locator {
  return page.locator('.jp-Notebook .jp-Cell').nth(index).locator('.ipr-cell-badge');
}

function outputs(page: IJupyterLabPageFixture, index: number): Locator {
  return page.locator('.jp-Notebook .jp-Cell').nth(index).locator('.jp-OutputArea-output');
}

/** The notebook file as saved on disk, through the server's contents API. */
async function savedFile(page: IJupyterLabPageFixture, file: string): Promise<string> {
  await page.notebook.save();
  return page.evaluate(async (p: string) => {
    const model = await (window as any).jupyterapp.serviceManager.contents.get(p, {
      type: 'file',
      format: 'text',
      content: true
    });
    return model.content as string;
  }, file);
}

const CELLS = [
  '%load_ext ipy_resume',
  '%%checkpoint load\nimport time\ntime.sleep(1.5)\ndata = list(range(5))\nprint("loaded", len(data))',
  '%%checkpoint total\ntotal = sum(data)\nprint("total", total)',
  '%%checkpoint locked\nimport threading\nlock = threading.Lock()\nprint("lock made")'
];

test('badges replace status lines; the saved notebook stays clean; Plan Run All', async ({
  page,
  tmpPath
}, testInfo) => {
  await page.notebook.createNew('badges.ipynb');
  await page.notebook.setCell(0, 'code', CELLS[0]);
  for (const source of CELLS.slice(1)) {
    await page.notebook.addCell('code', source);
  }
  await page.sidebar.openTab('ipy-resume-timeline');
  await page.sidebar.setWidth(460, 'right');
  const panel = page.locator(PANEL);
  await expect(panel).toBeVisible();

  // First Run All: the cells after %load_ext are queued before the panel's channel
  // opens; they still get badges and write no status line.
  await page.notebook.run();
  await expect(badge(page, 1)).toHaveAttribute('data-outcome', 'executed');
  await expect(badge(page, 1)).toContainText(/executed · \d/);
  await expect(badge(page, 2)).toHaveAttribute('data-outcome', 'executed');
  await expect(badge(page, 1)).toHaveAttribute('title', /no earlier checkpoint/);
  await expect(badge(page, 3)).toHaveAttribute('data-outcome', 'incomplete');
  expect(await page.notebook.getCellTextOutput(1)).toEqual(['loaded 5\n']);
  expect(await page.notebook.getCellTextOutput(2)).toEqual(['total 10\n']);
  // A value that could not be stored is a warning: it stays in the output area.
  const locked = ((await page.notebook.getCellTextOutput(3)) ?? []).join('');
  expect(locked).toContain('lock made');
  expect(locked).toContain("checkpoint 'locked' is incomplete");

  // The kernel process dies and the server restarts it (Galata's routes get in the way
  // of the restart API), then Run All again: restored, with the time saved.
  await page.evaluate(() => {
    const widget = (window as any).jupyterapp.shell.currentWidget;
    widget.sessionContext.session.kernel.requestExecute({
      code: 'import os, threading\nthreading.Timer(0.5, os._exit, [1]).start()'
    });
  });
  const status = panel.locator('.ipr-status');
  const dialog = page.locator('.jp-Dialog');
  await expect(async () => {
    if (await dialog.count()) {
      await dialog.locator('button.jp-mod-accept, button').last().click();
    }
    await expect(status).toHaveAttribute('data-status', 'not-loaded', { timeout: 1000 });
  }).toPass({ timeout: 90000 });
  // The "kernel died" dialog can open after the panel has noticed (on a slow machine it
  // did, and took Run All's click): wait for the new kernel, then close any dialog.
  await expect(async () => {
    if (await dialog.count()) {
      await dialog.locator('button.jp-mod-accept, button').last().click();
    }
    const kernel = await page.evaluate(
      () => (window as any).jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.status
    );
    expect(kernel).toBe('idle');
    await page.waitForTimeout(500);
    await expect(dialog).toHaveCount(0, { timeout: 100 });
  }).toPass({ timeout: 90000 });
  await page.notebook.run();
  await expect(badge(page, 1)).toHaveAttribute('data-outcome', 'restored');
  await expect(badge(page, 1)).toContainText(/restored · saved 1\.\d s · [0-9a-f]{8}/);
  await expect(badge(page, 2)).toHaveAttribute('data-outcome', 'restored');
  // The locked cell's checkpoint is incomplete: it executes again, and warns again.
  await expect(badge(page, 3)).toHaveAttribute('data-outcome', 'incomplete');
  // The output areas hold the cells' own output, exactly once.
  expect(await page.notebook.getCellTextOutput(1)).toEqual(['loaded 5\n']);
  expect(await page.notebook.getCellTextOutput(2)).toEqual(['total 10\n']);
  await expect(outputs(page, 1)).toHaveCount(1);
  await expect(outputs(page, 2)).toHaveCount(1);
  await page.notebook.selectCells(1);
  await shot(page.locator('#main'), testInfo, 'badges.png', true);

  // The saved file: the cells' outputs, no status text, no badge state.
  const file = `${tmpPath}/badges.ipynb`;
  const text = await savedFile(page, file);
  expect(text).toContain('loaded 5');
  expect(text).not.toContain('ipy_resume:  executed');
  expect(text).not.toMatch(/ipy_resume: (restored|executed)/);
  expect(text).not.toContain('ipr-');
  const saved = JSON.parse(text);
  expect(saved.cells[1].outputs).toHaveLength(1);
  expect(JSON.stringify(saved.cells[1].metadata)).not.toContain('ipy_resume');
  // Only the warning of the cell that could not be stored is in the file.
  expect(text.match(/ipy_resume:/g) ?? []).toHaveLength(1);

  // Clicking a badge shows its row in the timeline.
  await badge(page, 1).click();
  await expect(panel.locator('.ipr-details-cell')).toHaveText('load');

  // Plan Run All after editing 'total': pending badges say what Run All would do.
  await page.notebook.setCell(2, 'code', '%%checkpoint total\ntotal = sum(data) * 2\nprint("total", total)');
  await panel.locator('.ipr-plan-button').click();
  const rows = panel.locator('.ipr-plan-row');
  await expect(rows).toHaveCount(3);
  await expect(panel.locator('.ipr-plan-row[data-cell-id="load"]')).toHaveAttribute('data-verdict', 'restore');
  await expect(panel.locator('.ipr-plan-row[data-cell-id="total"]')).toHaveAttribute('data-verdict', 'execute');
  await expect(panel.locator('.ipr-plan-row[data-cell-id="total"]')).toContainText("the cell's code changed");
  await expect(badge(page, 1)).toHaveAttribute('data-outcome', 'plan-restore');
  await expect(badge(page, 1)).toContainText(/would restore · saves 1\.\d s/);
  await expect(badge(page, 2)).toHaveAttribute('data-outcome', 'plan-execute');
  await expect(badge(page, 2)).toContainText('would execute');
  await expect(panel.locator('.ipr-plan-total')).toContainText('would restore 1 of 3');
  await shot(page.locator('#main'), testInfo, 'plan.png', true);

  // Running a cell replaces its pending badge by what happened.
  await page.notebook.runCell(2);
  await expect(badge(page, 2)).toHaveAttribute('data-outcome', 'executed');
  await expect(badge(page, 2)).toHaveAttribute('title', /the cell's code changed/);
  expect(await page.notebook.getCellTextOutput(2)).toEqual(['total 20\n']);
  // The README's tour: real and pending badges, the plan and the timeline.
  await shot(page.locator('#main'), testInfo, 'tour.png', true);
});

test('badges in Notebook 7', async ({ page, browser, baseURL, tmpPath }, testInfo) => {
  const source = (text: string) => ({ cell_type: 'code', metadata: {}, outputs: [], execution_count: null, source: text });
  const notebook = {
    nbformat: 4,
    nbformat_minor: 5,
    metadata: { kernelspec: { name: 'python3', display_name: 'Python 3', language: 'python' } },
    cells: [
      source('%load_ext ipy_resume'),
      source('%%checkpoint alpha\na = 1'),
      source('%%checkpoint beta\nb = a + 1\nprint(b)')
    ]
  };
  await page.contents.uploadContent(JSON.stringify(notebook), 'text', `${tmpPath}/nb7-badges.ipynb`);
  const context = await browser.newContext({ viewport: { width: 1200, height: 700 } });
  const nb7 = await context.newPage();
  try {
    await nb7.goto(`${baseURL}/notebooks/${tmpPath}/nb7-badges.ipynb`);
    await expect(nb7.locator('.jp-Notebook .jp-Cell').first()).toBeVisible({ timeout: 60000 });
    await expect(nb7.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')).toBeVisible({
      timeout: 60000
    });
    await nb7.locator('.jp-Notebook .jp-Cell').first().click();
    await nb7.locator('.lm-MenuBar-item', { hasText: /^Run$/ }).click();
    await nb7.locator('.lm-Menu-itemLabel', { hasText: /^Run All Cells$/ }).click();
    const cells = nb7.locator('.jp-Notebook .jp-Cell');
    await expect(cells.nth(1).locator('.ipr-cell-badge')).toHaveAttribute('data-outcome', 'executed', {
      timeout: 60000
    });
    await expect(cells.nth(2).locator('.ipr-cell-badge')).toHaveAttribute('data-outcome', 'executed');
    // No status line: 'alpha' prints nothing, so its output area stays empty.
    await expect(cells.nth(1).locator('.jp-OutputArea-output')).toHaveCount(0);
    await expect(cells.nth(2).locator('.jp-OutputArea-output')).toHaveText(['2']);
    await shot(nb7.locator('.jp-Notebook'), testInfo, 'badges-notebook7.png');
  } finally {
    await context.close();
  }
});
