// The Khronos glTF validator on each .glb/.gltf named on the command line (external files,
// such as KTX2 images, are read relative to it); prints one JSON object: {path: report's
// issues summary and messages, and hasDefaultScene}. Exit status 0 when it ran, whatever it found.
//   node scripts/tools/validate_gltf.mjs mesh.glb mesh_ktx2.glb
import { readFile } from "node:fs/promises";
import path from "node:path";
import validator from "gltf-validator";

const reports = {};
for (const file of process.argv.slice(2)) {
  const folder = path.dirname(file);
  const report = await validator.validateBytes(new Uint8Array(await readFile(file)), {
    uri: path.basename(file),
    maxIssues: 100,
    externalResourceFunction: async (uri) =>
      new Uint8Array(await readFile(path.join(folder, decodeURIComponent(uri)))),
  });
  reports[file] = { ...report.issues, hasDefaultScene: report.info?.hasDefaultScene };
}
console.log(JSON.stringify(reports, null, 1));
