// Every level of each .ktx2 file named on the command line, decoded by the Basis Universal
// transcoder that three.js ships (what its KTX2Loader runs in a browser) to 8-bit RGBA;
// prints one JSON object {path: {uastc, srgb, alpha, levels: [{width, height, rgba}]}}, with
// rgba the level's rows top-down in base64.
//   node scripts/tools/transcode_ktx2.mjs texture_kd.ktx2
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { read } from "ktx-parse";

// three.js ships the transcoder as a classic script (its KTX2Loader loads it into a worker);
// evaluated here with node's require, it defines BASIS, the Emscripten module factory
const require = createRequire(import.meta.url);
const script = require.resolve("three/examples/jsm/libs/basis/basis_transcoder.js");
const BASIS = new Function("require", "__filename", "__dirname",
  `${await readFile(script, "utf8")}\nreturn BASIS;`)(require, script, path.dirname(script));
const basis = await BASIS({ wasmBinary: await readFile(script.replace(/\.js$/, ".wasm")) });
basis.initializeBasis();
const RGBA32 = 13; // basis_universal's transcoder_texture_format::cTFRGBA32
const SRGB = 2; // KHR_DF_TRANSFER_SRGB

const decoded = {};
for (const file of process.argv.slice(2)) {
  const data = new Uint8Array(await readFile(file));
  const texture = new basis.KTX2File(data);
  if (!texture.isValid() || !texture.startTranscoding()) {
    throw new Error(`${file}: the transcoder refuses it`);
  }
  const levels = [];
  for (let level = 0; level < texture.getLevels(); level++) {
    const info = texture.getImageLevelInfo(level, 0, 0);
    const rgba = new Uint8Array(texture.getImageTranscodedSizeInBytes(level, 0, 0, RGBA32));
    if (!texture.transcodeImage(rgba, level, 0, 0, RGBA32, 0, -1, -1)) {
      throw new Error(`${file}: level ${level} does not transcode`);
    }
    levels.push({ width: info.origWidth, height: info.origHeight,
                  rgba: Buffer.from(rgba).toString("base64") });
  }
  decoded[file] = { uastc: texture.isUASTC(), alpha: texture.getHasAlpha(),
                    srgb: read(data).dataFormatDescriptor[0].transferFunction === SRGB, levels };
  texture.close();
  texture.delete();
}
console.log(JSON.stringify(decoded));
