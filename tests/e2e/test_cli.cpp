// The kiln program's command line, run as a user runs it (the built binary,
// exit codes and messages), plus kiln::cli::parse_only in-process.
//
// Exit codes: 0 ok or --help, 1 kiln::Error (files, data), 2 usage error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "kiln/cuda.h"
#include "kiln/data.h"
#include "kiln/serialize.h"

namespace fs = std::filesystem;

namespace {

struct Outcome {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fresh scratch directory for one test.
fs::path scratch_dir() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "suite";
  fs::path dir = fs::temp_directory_path() / ("kiln_cli_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The program under test: this build's kiln, or $KILN_CLI_TEST_BIN (to run
// these tests against another build, such as main's, and see them fail there).
std::string kiln_bin() {
  const char* other = std::getenv("KILN_CLI_TEST_BIN");
  return other && *other ? other : KILN_BIN;
}

// Runs `kiln ARGS` in `cwd` through sh with `env` assignments before it. The
// exit status of a process killed by a signal reads as 128 + signal, as in sh.
Outcome run_kiln(const std::string& args, const fs::path& cwd, const std::string& env = "") {
  std::string cmd = "cd '" + cwd.string() + "' && env OMP_NUM_THREADS=2 " + env + " '" + kiln_bin() + "' " + args +
                    " >out.txt 2>err.txt";
  int status = std::system(cmd.c_str());
  Outcome r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(cwd / "out.txt");
  r.err = slurp(cwd / "err.txt");
  return r;
}

std::string show(const Outcome& r) { return "rc " + std::to_string(r.rc) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err; }

void expect_usage_error(const std::string& args, const std::string& fragment, const fs::path& cwd) {
  Outcome r = run_kiln(args, cwd);
  EXPECT_EQ(r.rc, 2) << "kiln " << args << "\n" << show(r);
  EXPECT_NE(r.err.find(fragment), std::string::npos) << "kiln " << args << ": no '" << fragment << "'\n" << show(r);
  EXPECT_NE(r.err.find("--help"), std::string::npos) << "kiln " << args << ": no pointer to --help\n" << show(r);
}

// Lines of `text` that start with '{', each parsed as JSON.
std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  return lines;
}

const std::string kFmnist = "--model tutorial --data fashion-mnist";

}  // namespace

TEST(CliHelp, EveryCommandsHelpExitsZeroAndListsItsOptions) {
  fs::path dir = scratch_dir();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--help", "train"},         {"help", "bench"},           {"train --help", "--workers"},
      {"train -h", "--data-dir"},  {"demo --help", "--steps"},  {"data --help", "import"},
      {"data import --help", "FILE|DIR"}, {"data get --help", "--dir"}, {"bench --help", "ops"},
      {"bench ops --help", "--cases"}, {"help train", "Usage: kiln train"}};
  for (const auto& [args, fragment] : cases) {
    Outcome r = run_kiln(args, dir);
    EXPECT_EQ(r.rc, 0) << "kiln " << args << "\n" << show(r);
    EXPECT_NE(r.out.find(fragment), std::string::npos) << "kiln " << args << "\n" << show(r);
  }
  // The help states the bounds and the Fashion-MNIST lookup order.
  Outcome r = run_kiln("train --help", dir);
  EXPECT_NE(r.out.find("0 to 256"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KILN_FASHION_MNIST"), std::string::npos) << r.out;
}

TEST(CliUsage, EpochsMustBeAPositiveWholeNumber) {
  fs::path dir = scratch_dir();
  for (const char* v : {"1.9", "1e30", "nan", "-1", "0", "0x10", "inf", "3x", ""})
    expect_usage_error(std::string("train --epochs '") + v + "'", std::string("--epochs: expected a whole number"),
                       dir);
  expect_usage_error("train --epochs 1.9", "got '1.9'", dir);
  expect_usage_error("demo --epochs 1.5", "--epochs: expected a whole number", dir);
  expect_usage_error("demo --steps x", "--steps: expected a whole number", dir);
}

TEST(CliUsage, SeedMustBeANonNegativeWholeNumber) {
  fs::path dir = scratch_dir();
  for (const char* v : {"-1", "1.5", "1e3", "18446744073709551616"})
    expect_usage_error(std::string("train --seed ") + v, "--seed: expected a whole number >= 0", dir);
}

TEST(CliUsage, WorkersAreBounded) {
  fs::path dir = scratch_dir();
  expect_usage_error("train --workers 100000", "--workers: expected a whole number from 0 to 256, got '100000'", dir);
  expect_usage_error("train --workers -1", "--workers: expected a whole number from 0 to 256", dir);
}

TEST(CliUsage, NumbersAreRangeChecked) {
  fs::path dir = scratch_dir();
  for (const char* v : {"nan", "inf", "0", "-1", "17", "0x1p2"})
    expect_usage_error(std::string("train --model airbench --width ") + v, "--width: expected a finite number > 0",
                       dir);
  for (const char* v : {"0", "-3", "2.5"}) expect_usage_error(std::string("train --batch ") + v, "--batch:", dir);
  for (const char* v : {"nan", "-1", "inf"}) expect_usage_error(std::string("train --lr ") + v, "--lr:", dir);
  expect_usage_error("train --steps -1", "--steps:", dir);
  expect_usage_error("bench ops --reps 0", "--reps:", dir);
  expect_usage_error("bench ops --threads 1.5", "--threads:", dir);
}

TEST(CliUsage, UnknownNamesAndArgumentsAreUsageErrors) {
  fs::path dir = scratch_dir();
  expect_usage_error("", "A subcommand is required", dir);
  expect_usage_error("frobnicate", "frobnicate", dir);
  expect_usage_error("train --model foo", "unknown model 'foo'; use tutorial, resnet18 or airbench", dir);
  expect_usage_error("train --data foo", "unknown data set 'foo'", dir);
  expect_usage_error("train --opt foo", "unknown optimizer 'foo'", dir);
  expect_usage_error("train --bogus", "--bogus", dir);
  expect_usage_error("train --epochs", "--epochs", dir);
  expect_usage_error("train --model tutorial --width 2", "--width: applies only to --model airbench", dir);
  expect_usage_error("train --data cifar10 --data-dir /tmp", "--data-dir: names Fashion-MNIST's directory", dir);
  expect_usage_error("bench", "kiln bench", dir);
  expect_usage_error("bench ops --cases nope", "unknown case 'nope'", dir);
  expect_usage_error("data import cifar10", "source is required", dir);
  expect_usage_error("data get mnist", "unknown data set 'mnist'", dir);
  expect_usage_error("help frobnicate", "unknown command 'frobnicate'", dir);
}

TEST(CliParseOnly, AcceptsGoodLinesAndRejectsBadOnesWithoutRunning) {
  auto parse = [](std::vector<const char*> args, std::string* msg = nullptr) {
    args.insert(args.begin(), "kiln");
    return kiln::cli::parse_only(static_cast<int>(args.size()), args.data(), msg);
  };
  EXPECT_EQ(parse({"train", "--model", "airbench", "--width", "0.5", "--epochs", "3", "--seed", "7"}), 0);
  EXPECT_EQ(parse({"train", "--save", "/nonexistent/dir/ck.safetensors"}), 0);  // paths are checked when it runs
  EXPECT_EQ(parse({"data", "import", "cifar10", "/some/dir", "--dir", "d"}), 0);
  EXPECT_EQ(parse({"bench", "ops", "--cases", "matmul_1024,linear_fc", "--json"}), 0);
  EXPECT_EQ(parse({"train", "--help"}), 0);
  std::string msg;
  EXPECT_EQ(parse({"train", "--epochs", "1.9"}, &msg), 2);
  EXPECT_NE(msg.find("kiln train: --epochs: expected a whole number from 1 to 1000000, got '1.9'"), std::string::npos)
      << msg;
  EXPECT_EQ(parse({"train", "--workers", "100000"}), 2);
  EXPECT_EQ(parse({}), 2);
}

TEST(CliParseOnly, OddArgvNeverThrows) {
  const std::vector<std::vector<const char*>> lines = {
      {""}, {"-"}, {"--"}, {"---"}, {"="}, {"-h", "-h"}, {"train", "--epochs="}, {"train", "--=1"},
      {"train", "--epochs", "--epochs"}, {"data", "import", "cifar10", "-"}, {"bench", "ops", "--cases", ","},
      {"train", "--seed", "99999999999999999999999999"}, {"train", "-abc"}, {"\xff\xfe", "--\xff"},
      {"train", "--model=airbench", "--width=1e-320"}, {"help", "train"}};
  for (auto args : lines) {
    args.insert(args.begin(), "kiln");
    std::string msg;
    int rc = -1;
    EXPECT_NO_THROW(rc = kiln::cli::parse_only(static_cast<int>(args.size()), args.data(), &msg));
    EXPECT_TRUE(rc == 0 || rc == 2) << rc;
  }
  EXPECT_NO_THROW(kiln::cli::parse_only(0, nullptr));
}

TEST(CliTrain, BatchLargerThanTheTrainingSetIsAnErrorNamingBothNumbers) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("train " + kFmnist + " --batch 60001 --steps 1", dir);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("batch 60001 is larger than the training set (60000 images"), std::string::npos) << show(r);
  EXPECT_EQ(r.out.find("epoch 1/1"), std::string::npos) << show(r);
}

TEST(CliTrain, OutputPathsAreCheckedBeforeTraining) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("train " + kFmnist + " --steps 1 --save no/such/dir/ck.safetensors", dir);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("--save no/such/dir/ck.safetensors: the directory no/such/dir does not exist"),
            std::string::npos)
      << show(r);
  EXPECT_EQ(r.out.find("training"), std::string::npos) << "trained before checking --save\n" << show(r);

  r = run_kiln("train " + kFmnist + " --steps 1 --save-init missing/init.safetensors", dir);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("--save-init missing/init.safetensors: the directory missing does not exist"),
            std::string::npos)
      << show(r);

  r = run_kiln("train " + kFmnist + " --steps 1 --save .", dir);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << show(r);

  r = run_kiln("train " + kFmnist + " --steps 1 --resume nothing.safetensors", dir);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("--resume nothing.safetensors is not a file"), std::string::npos) << show(r);
}

// --profile and KILN_PROFILE: the per-op table at the end, a trace that is
// the Chrome trace format, and a bad trace path refused before training.
TEST(CliTrain, ProfileWritesATraceAndPrintsThePerOpTable) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("train " + kFmnist + " --steps 2 --workers 0 --profile trace.json", dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  EXPECT_NE(r.out.find("profile (trace: trace.json"), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("conv2d"), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("ops total "), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("backward"), std::string::npos) << show(r);
  nlohmann::json trace = nlohmann::json::parse(slurp(dir / "trace.json"));
  ASSERT_GT(trace["traceEvents"].size(), 10u);
  std::map<std::string, int> ranges;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_EQ(e["ph"], "X") << e;
    if (e["cat"] == "range") ++ranges[e["name"].get<std::string>()];
  }
  EXPECT_EQ(ranges["backward"], 2) << trace.dump().substr(0, 2000);
  EXPECT_EQ(ranges["optimizer.step"], 2);
  EXPECT_GE(ranges["dataloader.next"], 2);

  // KILN_PROFILE does the same; with --json the table goes to stderr.
  r = run_kiln("train " + kFmnist + " --steps 1 --workers 0 --json", dir, "KILN_PROFILE=env.json");
  ASSERT_EQ(r.rc, 0) << show(r);
  EXPECT_NE(r.err.find("ops total "), std::string::npos) << show(r);
  for (const nlohmann::json& line : json_lines(r.out)) EXPECT_TRUE(line.is_object());
  EXPECT_GT(nlohmann::json::parse(slurp(dir / "env.json"))["traceEvents"].size(), 5u);

  r = run_kiln("train " + kFmnist + " --steps 1 --profile no/such/dir/t.json", dir);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("--profile no/such/dir/t.json: the directory no/such/dir does not exist"), std::string::npos)
      << show(r);
  EXPECT_EQ(r.out.find("training"), std::string::npos) << show(r);
}

#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_ASAN 1
#endif
#endif

TEST(CliTrain, RefusedWorkerThreadsAreAnError) {
#ifdef KILN_TEST_ASAN
  GTEST_SKIP() << "ulimit -v cannot coexist with AddressSanitizer's shadow memory";
#endif
  fs::path dir = scratch_dir();
  // 1 GB of address space fits the data and the model but not 256 thread stacks
  // of 16 MB (the default thread stack follows ulimit -s).
  Outcome r = run_kiln("train " + kFmnist + " --steps 1 --workers 256", dir,
                       "sh -c 'ulimit -s 16384 2>/dev/null; ulimit -v 1000000 && exec \"$0\" \"$@\"'");
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("the system refused to start 256 data-loading threads"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("use fewer --workers"), std::string::npos) << show(r);
}

// One real checkpoint (kiln train --save), then copies with damaged "epoch" metadata.
class CliResume : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("kiln_cli_" + std::to_string(getpid()) + "_resume"));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    first_ = new Outcome(run_kiln("train " + kFmnist + " --epochs 1 --steps 2 --json --save ck.safetensors", *dir_));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete first_;
  }
  // A copy of the checkpoint whose "epoch" is `epoch` (nullptr: removed).
  static std::string with_epoch(const char* name, const char* epoch) {
    std::map<std::string, std::string> meta;
    kiln::nn::TensorDict tensors = kiln::load_safetensors((*dir_ / "ck.safetensors").string(), &meta);
    if (epoch) meta["epoch"] = epoch;
    else meta.erase("epoch");
    kiln::save_safetensors((*dir_ / name).string(), tensors, meta);
    return name;
  }
  static fs::path* dir_;
  static Outcome* first_;
};
fs::path* CliResume::dir_ = nullptr;
Outcome* CliResume::first_ = nullptr;

TEST_F(CliResume, TheCheckpointResumes) {
  ASSERT_EQ(first_->rc, 0) << show(*first_);
  Outcome r = run_kiln("train " + kFmnist + " --epochs 2 --steps 2 --json --resume ck.safetensors", *dir_);
  EXPECT_EQ(r.rc, 0) << show(r);
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << show(r);
  EXPECT_EQ(lines[0]["epoch"], 2);
}

TEST_F(CliResume, BadEpochMetadataIsAnErrorNamingTheFileAndTheValue) {
  ASSERT_EQ(first_->rc, 0) << show(*first_);
  struct Case {
    const char* file;
    const char* epoch;
    const char* fragment;
  };
  const std::vector<Case> cases = {
      {"no_epoch.safetensors", nullptr, "no_epoch.safetensors has no 'epoch' in its metadata"},
      {"word.safetensors", "one", "word.safetensors has epoch 'one' in its metadata where a count"},
      {"empty.safetensors", "", "empty.safetensors has epoch '' in its metadata"},
      {"trail.safetensors", "1x", "trail.safetensors has epoch '1x'"},
      {"huge.safetensors", "99999999999999999999999", "huge.safetensors has epoch '99999999999999999999999' in its "
                                                      "metadata, out of range"},
      {"negative.safetensors", "-5", "negative.safetensors has epoch '-5' in its metadata where a count"},
  };
  for (const Case& c : cases) {
    std::string file = with_epoch(c.file, c.epoch);
    Outcome r = run_kiln("train " + kFmnist + " --epochs 3 --steps 2 --resume " + file, *dir_);
    EXPECT_EQ(r.rc, 1) << c.file << "\n" << show(r);
    EXPECT_NE(r.err.find(c.fragment), std::string::npos) << c.file << "\n" << show(r);
    EXPECT_NE(r.err.find("kiln train --resume: "), std::string::npos) << show(r);
  }
  // A finished checkpoint asks for more epochs.
  Outcome r = run_kiln("train " + kFmnist + " --epochs 1 --steps 2 --resume ck.safetensors", *dir_);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("already finished 1 epochs"), std::string::npos) << show(r);
}

// --json lines keep the keys and value types bench/vs_torch.sh reads.
TEST_F(CliResume, TrainJsonLinesHaveTheKeysTheBenchReads) {
  ASSERT_EQ(first_->rc, 0) << show(*first_);
  auto lines = json_lines(first_->out);
  ASSERT_EQ(lines.size(), 2u) << show(*first_);
  const nlohmann::json& epoch = lines[0];
  ASSERT_EQ(epoch.size(), 4u) << epoch.dump();
  EXPECT_TRUE(epoch["epoch"].is_number_integer());
  EXPECT_EQ(epoch["epoch"], 1);
  for (const char* k : {"train_loss", "test_acc", "train_img_per_s"}) EXPECT_TRUE(epoch[k].is_number()) << k;
  const nlohmann::json& summary = lines[1];
  ASSERT_EQ(summary.size(), 8u) << summary.dump();
  EXPECT_EQ(summary["compiled"], false);
  EXPECT_TRUE(summary["first_step_s"].is_number()) << summary.dump();
  EXPECT_EQ(summary["model"], "tutorial");
  EXPECT_TRUE(summary["epochs"].is_number_integer());
  EXPECT_EQ(summary["epochs"], 1);
  for (const char* k : {"train_img_per_s", "eval_img_per_s", "test_acc", "wall_s"})
    EXPECT_TRUE(summary[k].is_number()) << k;
  EXPECT_GE(summary["test_acc"].get<double>(), 0.0);
  EXPECT_LE(summary["test_acc"].get<double>(), 1.0);
  EXPECT_EQ(first_->out.find("\"wall_s\""), first_->out.rfind("\"wall_s\""));  // one summary line
}

// --compile runs the whole step as one compiled graph: the same losses and
// accuracy as eager (same seed, data order and weights), and a summary that
// says how it compiled.
TEST(CliTrain, CompiledTrainingMatchesEagerAndSaysHowItCompiled) {
  fs::path dir = scratch_dir();
  const std::string args = "train " + kFmnist + " --epochs 2 --steps 3 --json";
  Outcome eager = run_kiln(args, dir);
  Outcome compiled = run_kiln(args + " --compile", dir);
  ASSERT_EQ(eager.rc, 0) << show(eager);
  ASSERT_EQ(compiled.rc, 0) << show(compiled);
  auto e = json_lines(eager.out), c = json_lines(compiled.out);
  ASSERT_EQ(e.size(), 3u) << show(eager);
  ASSERT_EQ(c.size(), 3u) << show(compiled);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(c[i]["train_loss"].get<double>(), e[i]["train_loss"].get<double>(),
                1e-4 * std::abs(e[i]["train_loss"].get<double>()))
        << "epoch " << i + 1;
    // 3 eval batches of 500: a last-bit difference may flip an argmax or two.
    EXPECT_NEAR(c[i]["test_acc"].get<double>(), e[i]["test_acc"].get<double>(), 2.0 / 1500) << "epoch " << i + 1;
  }
  EXPECT_EQ(c[2]["compiled"], true);
  EXPECT_GT(c[2]["first_step_s"].get<double>(), 0.0);

  Outcome text = run_kiln("train " + kFmnist + " --epochs 1 --steps 2 --compile --backend interpreter", dir);
  ASSERT_EQ(text.rc, 0) << show(text);
  EXPECT_NE(text.out.find("compiled (mode default, backend interpreter): train step 1 graph, 0 graph breaks, "
                          "0 recompiles, first call "),
            std::string::npos)
      << show(text);
  expect_usage_error("train --mode max-autotune", "--mode requires --compile", dir);
  expect_usage_error("train --compile --backend cuda", "backend", dir);
}

// The seed's demo: eager and compiled runs side by side, one table row each.
TEST(CliDemo, RunsEagerAndCompiledAndPrintsOneRowPerMode) {
  fs::path dir = scratch_dir();
  fs::create_directories(dir / "empty-data");
  const std::string no_cifar = "KILN_DATA='" + (dir / "empty-data").string() +
                               "' KILN_CIFAR10_ARCHIVE= KILN_CIFAR10_URL=http://127.0.0.1:9/cifar-10-binary.tar.gz";
  Outcome r = run_kiln("demo --steps 2 --epochs 1", dir, no_cifar);
  ASSERT_EQ(r.rc, 0) << show(r);
  size_t header = r.out.find("mode        test acc  train img/s  eval img/s   first step (s)");
  ASSERT_NE(header, std::string::npos) << show(r);
  size_t eager = r.out.find("\neager ", header), compiled = r.out.find("\ncompiled ", header);
  EXPECT_NE(eager, std::string::npos) << show(r);
  EXPECT_NE(compiled, std::string::npos) << show(r);
  EXPECT_LT(eager, compiled) << show(r);
  EXPECT_NE(r.out.find("compiled / eager: train "), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("test accuracies: compiled "), std::string::npos) << show(r);
  EXPECT_NE(r.out.find(" points against eager"), std::string::npos) << show(r);
}

TEST(CliBench, OpsJsonLineHasCaseAndMilliseconds) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("bench ops --json --cases matmul_1024 --reps 1", dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << show(r);
  EXPECT_EQ(lines[0].size(), 2u);
  EXPECT_EQ(lines[0]["case"], "matmul_1024");
  EXPECT_TRUE(lines[0]["kiln_ms"].is_number());
  EXPECT_GT(lines[0]["kiln_ms"].get<double>(), 0.0);

  r = run_kiln("bench ops --list", dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  EXPECT_EQ(r.out.rfind("conv_resnet_block\t", 0), 0u) << r.out;
}

// --device cuda without a usable GPU (or in a build without CUDA): exit 1
// with the reason before any data is loaded, never a crash.
TEST(CliDevice, CudaWithoutAGpuIsAClearError) {
  if (kiln::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  fs::path dir = scratch_dir();
  for (const std::string& args : {"train " + kFmnist + " --steps 1 --device cuda",
                                 std::string("bench ops --cases matmul_1024 --reps 1 --device cuda")}) {
    Outcome r = run_kiln(args, dir);
    EXPECT_EQ(r.rc, 1) << "kiln " << args << "\n" << show(r);
    EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << show(r);
    EXPECT_TRUE(r.err.find("no CUDA device") != std::string::npos ||
                r.err.find("kiln was built without CUDA") != std::string::npos)
        << show(r);
    EXPECT_NE(r.err.find("--device cpu"), std::string::npos) << show(r);
    EXPECT_EQ(r.out.find("epoch 1/1"), std::string::npos) << show(r);
  }
  expect_usage_error("train " + kFmnist + " --device tpu", "unknown device 'tpu'", dir);
}

// Fashion-MNIST: --data-dir, then $KILN_FASHION_MNIST, then Debian's directory.
TEST(CliFashionMnist, FindsTheDirectoryInTheStatedOrder) {
  const char* saved = std::getenv("KILN_FASHION_MNIST");
  std::string saved_value = saved ? saved : "";
  unsetenv("KILN_FASHION_MNIST");
  EXPECT_EQ(kiln::data::find_fashion_mnist_dir(), kiln::data::default_fashion_mnist_dir());
  EXPECT_EQ(kiln::data::find_fashion_mnist_dir("/flag/dir"), "/flag/dir");
  setenv("KILN_FASHION_MNIST", "", 1);
  EXPECT_EQ(kiln::data::find_fashion_mnist_dir(), kiln::data::default_fashion_mnist_dir());
  setenv("KILN_FASHION_MNIST", "/env/dir", 1);
  EXPECT_EQ(kiln::data::find_fashion_mnist_dir(), "/env/dir");
  EXPECT_EQ(kiln::data::find_fashion_mnist_dir("/flag/dir"), "/flag/dir");
  if (saved) setenv("KILN_FASHION_MNIST", saved_value.c_str(), 1);
  else unsetenv("KILN_FASHION_MNIST");
}

TEST(CliFashionMnist, DataDirFlagAndEnvironmentVariableAreUsed) {
  fs::path dir = scratch_dir();
  fs::path copy = dir / "fmnist";
  fs::create_directories(copy);
  for (const auto& e : fs::directory_iterator(kiln::data::default_fashion_mnist_dir()))
    fs::create_symlink(e.path(), copy / e.path().filename());

  Outcome r = run_kiln("train " + kFmnist + " --epochs 1 --steps 1 --data-dir '" + copy.string() + "'", dir,
               "KILN_FASHION_MNIST=/nonexistent/env");
  EXPECT_EQ(r.rc, 0) << show(r);
  EXPECT_NE(r.out.find("on " + copy.string() + " (train)"), std::string::npos) << show(r);

  r = run_kiln("train " + kFmnist + " --epochs 1 --steps 1", dir, "KILN_FASHION_MNIST='" + copy.string() + "'");
  EXPECT_EQ(r.rc, 0) << show(r);
  EXPECT_NE(r.out.find("on " + copy.string() + " (train)"), std::string::npos) << show(r);

  r = run_kiln("train " + kFmnist + " --steps 1 --data-dir /nonexistent/flag", dir);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("/nonexistent/flag is not a directory (looked up in this order: --data-dir, "
                       "$KILN_FASHION_MNIST, /usr/share/datasets/fashion-mnist"),
            std::string::npos)
      << show(r);

  r = run_kiln("train " + kFmnist + " --steps 1", dir, "KILN_FASHION_MNIST=/nonexistent/env");
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("/nonexistent/env is not a directory"), std::string::npos) << show(r);
}

TEST(CliFashionMnist, DemoFallsBackToTheDataDir) {
  fs::path dir = scratch_dir();
  fs::create_directories(dir / "empty-data");
  const std::string no_cifar = "KILN_DATA='" + (dir / "empty-data").string() +
                               "' KILN_CIFAR10_ARCHIVE= KILN_CIFAR10_URL=http://127.0.0.1:9/cifar-10-binary.tar.gz";
  Outcome r = run_kiln("demo --steps 1 --epochs 1 --data-dir /nonexistent/demo", dir, no_cifar);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.out.find("falling back to Fashion-MNIST from /nonexistent/demo"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("/nonexistent/demo is not a directory"), std::string::npos) << show(r);
}

TEST(CliData, ImportPassesADirectoryToTheImporter) {
  fs::path dir = scratch_dir();
  fs::create_directories(dir / "folder");
  Outcome r = run_kiln("data import cifar10 folder --dir out", dir);
  // The CLI hands the directory to data::import_cifar10, whose message names it.
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("folder"), std::string::npos) << show(r);
  EXPECT_EQ(r.err.find("--help"), std::string::npos) << "a directory is not a usage error\n" << show(r);
}

// kiln explain --train --json: one JSON object on stdout describing one whole
// train step (forward, backward, the SGD update) captured without a break.
// --autocast bf16 on the eval forward and the train step: the scope opens
// inside the compiled function (around it, capture refuses): the captured
// graph casts to bf16, and each convolution runs on bf16 operands or, where
// bfloat16 measured slower for it, on float32 ones (float32_regions).
TEST(CliExplain, AutocastBf16CompilesTheForwardAndTheTrainStep) {
  fs::path dir = scratch_dir();
  for (const char* train : {"", " --train"}) {
    SCOPED_TRACE(train);
    Outcome r = run_kiln(std::string("explain --model tutorial --backend cpp --autocast bf16 --batch 2 --json") + train,
                         dir);
    ASSERT_EQ(r.rc, 0) << show(r);
    nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_FALSE(j["convolutions"].empty()) << r.out.substr(0, 400);
    EXPECT_GT(j["ops"].value("cast", 0), 0) << j["ops"].dump();
    for (const nlohmann::json& c : j["convolutions"]) {
      const std::string shapes = c["shapes"].get<std::string>(), precision = c["precision"].get<std::string>();
      if (precision == "bfloat16") EXPECT_NE(shapes.find("bf16["), std::string::npos) << c.dump();
      else EXPECT_TRUE(precision == "float32" && shapes.find("bf16[") == std::string::npos) << c.dump();
    }
  }
}

// --executable: the graphs as they run, with what the passes made of them
// (batch norms that apply their GELU, the GELU's backward inside batch norm's).
TEST(CliExplain, ExecutablePrintsTheGraphsAfterThePasses) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("explain --model airbench --train --batch 2 --executable", dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  EXPECT_NE(r.out.find("as it runs, after functionalization and the passes"), std::string::npos)
      << r.out.substr(0, 800);
  EXPECT_NE(r.out.find("= batch_norm_backward("), std::string::npos);
  EXPECT_NE(r.out.find("activation=\"gelu\""), std::string::npos) << r.out.substr(0, 800);
  Outcome captured = run_kiln("explain --model airbench --train --batch 2", dir);
  ASSERT_EQ(captured.rc, 0) << show(captured);
  EXPECT_EQ(captured.out.find("activation=\"gelu\""), std::string::npos);  // as captured: the plain ops
}

TEST(CliExplain, AirbenchTrainJsonIsOneObjectWithOneGraphPerStepAndNoBreak) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("explain --model airbench --train --batch 2 --json", dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  nlohmann::json j = nlohmann::json::parse(r.out);  // throws unless stdout is exactly one JSON value
  ASSERT_TRUE(j.is_object()) << r.out.substr(0, 400);
  EXPECT_TRUE(j["graph_breaks"].is_array());
  EXPECT_TRUE(j["graph_breaks"].empty()) << j["graph_breaks"].dump();
  ASSERT_TRUE(j["graphs"].is_array());
  ASSERT_FALSE(j["graphs"].empty());
  EXPECT_TRUE(j["graphs"].back()["has_backward"].get<bool>());
  for (const auto& g : j["graphs"])
    for (const char* key : {"name", "text", "dot", "num_ops"}) EXPECT_TRUE(g.contains(key)) << key;
  EXPECT_TRUE(j["guards"].is_array() && !j["guards"].empty());
  const auto& ops = j["ops"];
  ASSERT_TRUE(ops.is_object());
  EXPECT_GT(ops.value("conv2d", 0), 0) << ops.dump();
  // SGD with nesterov momentum and weight decay updates parameters and buffers in place.
  EXPECT_GT(ops.value("add_", 0), 0) << ops.dump();
  EXPECT_GT(ops.value("mul_", 0), 0) << ops.dump();
  ASSERT_TRUE(j["saved_bytes_eager"].is_number_integer());
  ASSERT_TRUE(j["saved_bytes_partitioned"].is_number_integer());
  EXPECT_LE(j["saved_bytes_partitioned"].get<int64_t>(), j["saved_bytes_eager"].get<int64_t>());
  EXPECT_GT(j["saved_bytes_partitioned"].get<int64_t>(), 0);

  // --html into a missing directory fails before compiling, naming the path.
  r = run_kiln("explain --model tutorial --html /nonexistent/x.html", dir);
  EXPECT_EQ(r.rc, 1) << show(r);
  EXPECT_NE(r.err.find("/nonexistent"), std::string::npos) << show(r);
}


// kiln bench models --json: one object per (model, mode, phase) with the
// keys the issue names; compiled modes report a cold compile and a warm start
// measured in a second process, eager reports neither.
TEST(CliBenchModels, JsonHasOneObjectPerCaseWithCompileAndWarmSeconds) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("bench models --models tutorial --modes eager,default --phases eval --batch 4 --steps 1 --json",
                       dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  std::vector<nlohmann::json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const auto& j : lines) {
    for (const char* key : {"model", "mode", "phase", "img_per_s", "compile_s", "warm_s"})
      EXPECT_TRUE(j.contains(key)) << key << " in " << j.dump();
    EXPECT_EQ(j["model"], "tutorial");
    EXPECT_EQ(j["phase"], "eval");
    EXPECT_GT(j["img_per_s"].get<double>(), 0.0) << j.dump();
  }
  EXPECT_EQ(lines[0]["mode"], "eager");
  EXPECT_TRUE(lines[0]["compile_s"].is_null());
  EXPECT_EQ(lines[1]["mode"], "default");
  ASSERT_TRUE(lines[1]["compile_s"].is_number()) << lines[1].dump();
  EXPECT_GE(lines[1]["compile_s"].get<double>(), 0.0);
  ASSERT_TRUE(lines[1]["warm_s"].is_number()) << "the warm-start process ran: " << lines[1].dump();
  EXPECT_GE(lines[1]["warm_s"].get<double>(), 0.0);
  expect_usage_error("bench models --modes fast", "unknown mode 'fast'", dir);
}

// --rounds: the modes timed side by side in alternating rounds; each line
// says how many, counts every round's steps, and the speed-up is the median
// of the rounds' own ratios (so not necessarily the ratio of the medians).
TEST(CliBenchModels, RoundsTimeTheModesSideBySide) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("bench models --models tutorial --modes eager,default,bf16 --phases eval --batch 4 --steps 2 "
                       "--rounds 3 --json --no-warm",
                       dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  std::vector<nlohmann::json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  for (const auto& j : lines) {
    EXPECT_EQ(j["rounds"], 3) << j.dump();
    EXPECT_EQ(j["steps"], 6) << "2 steps in each of 3 rounds: " << j.dump();
    EXPECT_GT(j["img_per_s"].get<double>(), 0.0) << j.dump();
  }
  EXPECT_TRUE(lines[0]["speedup_vs_eager"].is_null()) << lines[0].dump();
  EXPECT_TRUE(lines[1]["speedup_vs_eager"].is_number()) << lines[1].dump();
  EXPECT_TRUE(lines[2]["speedup_vs_eager"].is_number()) << lines[2].dump();
  EXPECT_TRUE(lines[2]["vs_compiled_fp32"].is_number()) << lines[2].dump();
  ASSERT_TRUE(lines[1]["compile_s"].is_number()) << lines[1].dump();
  expect_usage_error("bench models --rounds 0", "--rounds", dir);
}

// --autocast bf16 runs the steps under autocast and says so in each line;
// the CUDA allocator's counts appear only for a CUDA device.
TEST(CliBenchModels, AutocastIsNamedInTheJsonAndAnUnknownDtypeIsAUsageError) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("bench models --models tutorial --modes eager --batch 4 --steps 1 --json --autocast bf16", dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  std::vector<nlohmann::json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const auto& j : lines) {
    EXPECT_EQ(j["autocast"], "bf16") << j.dump();
    EXPECT_GT(j["img_per_s"].get<double>(), 0.0) << j.dump();
    EXPECT_FALSE(j.contains("cuda_mallocs")) << j.dump();
  }
  expect_usage_error("bench models --autocast fp8", "fp8", dir);
}

// Mode bf16: the default compile under bf16 autocast, with its ratio to the
// float32 default mode of the same run (issue 9: "ratio printed per model").
TEST(CliBenchModels, Bf16ModeCarriesItsRatioToCompiledFloat32) {
  fs::path dir = scratch_dir();
  Outcome r = run_kiln("bench models --models tutorial --modes default,bf16 --phases eval --batch 4 --steps 1 --json "
                       "--no-warm",
                       dir);
  ASSERT_EQ(r.rc, 0) << show(r);
  std::vector<nlohmann::json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_TRUE(lines[0]["autocast"].is_null()) << lines[0].dump();
  EXPECT_FALSE(lines[0].contains("vs_compiled_fp32")) << lines[0].dump();
  EXPECT_EQ(lines[1]["mode"], "bf16");
  EXPECT_EQ(lines[1]["autocast"], "bf16");
  ASSERT_TRUE(lines[1]["vs_compiled_fp32"].is_number()) << lines[1].dump();
  // Within 1% of the ratio: img_per_s is printed rounded, and one step of
  // batch 4 can run hundreds of times faster in one mode than the other.
  const double ratio = lines[1]["img_per_s"].get<double>() / lines[0]["img_per_s"].get<double>();
  EXPECT_NEAR(lines[1]["vs_compiled_fp32"].get<double>(), ratio, 0.01 * std::max(1.0, ratio));
  Outcome both = run_kiln("bench models --modes bf16 --autocast bf16", dir);
  EXPECT_NE(both.rc, 0);
  EXPECT_NE(both.err.find("drop --autocast"), std::string::npos) << show(both);
}

