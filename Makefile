# zerolab — one entry point.
#   make demo            the guided tour (installs what is missing first)
#   make test            every contract (unit + multi-rank), ends with Criterion's summary
#   make test-long       the longer sweeps make test leaves out (suites *_long), then make test-sanitize
#   make test-sanitize   make test's suites under ASan + UBSan, the engine's under TSan (26-57 min)
#   make run CH=03 NP=4 ARGS="--steps 50"
#   make run CH=05 NP=4 NODES=2 LINK_MBIT=200   the same across 2 emulated nodes (root)
#   make IMPL=exercises  build the student's tree (exercises/, the rest from solutions/);
#   make exercise CH=01  test one chapter
#   make doctor          what the build found;  make GPU=0  CPU only
#   make explorer        the page to play with: results/explorer/index.html (needs emscripten)
# Everything is built under build/ (ignored). See README.md.

IMPL    ?= solutions
GPU     ?= auto
CH      ?=
NP      ?= 2
ARGS    ?=

BUILD   ?= build
# IMPL is solutions/ or a tree over it: exercises/ (only the files with an exercise), or any other
# directory (make exercise builds one: exercises/ with the reference bodies for the rest); a tree's
# missing files come from solutions/ (IMPL_C below)
ifeq ($(IMPL),solutions)
OUT := $(BUILD)
else ifeq ($(IMPL),exercises)
OUT := $(BUILD)/exercises
else ifneq ($(wildcard $(IMPL)/.),)
OUT := $(IMPL)-build
else
$(error IMPL must be solutions or exercises (or a directory of some of solutions/'s files), not '$(IMPL)')
endif
OBJ := $(OUT)/obj
BIN := $(OUT)/bin
COBJ := $(BUILD)/obj/common

# ---- toolchain -----------------------------------------------------------------------------
CC       := mpicc
PYTHON   := $(shell for p in python3 /usr/bin/python3; do $$p -c 'import sys' 2>/dev/null && { command -v $$p; break; }; done)
# Plots need matplotlib: Debian's python3-matplotlib is for /usr/bin/python3, and a pyenv/conda
# python3 first on PATH often lacks it, so take the first python that imports it (make doctor
# shows which). Evaluated only where used.
PLOT_PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import matplotlib' 2>/dev/null && { command -v $$p; break; }; done)
CRIT_CFLAGS := $(shell pkg-config --cflags criterion 2>/dev/null)
CRIT_LIBS   := $(shell pkg-config --libs criterion 2>/dev/null || echo -lcriterion)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
WARN     := -Wall -Wextra -Werror -Wno-unused-parameter
CFLAGS   ?= -O2 -g -fno-math-errno
# common/ is layered (notes/design.md, "The layers"): base < device < comm < model < train; each
# layer is a folder, and every folder is on the include path ("comm.h", not a relative path)
LAYERS   := base device comm model train
LAYER_INC := $(LAYERS:%=-Icommon/%)
# IMPL's headers before solutions/'s (today every header is in solutions/ only: none holds an exercise;
# a "x.h" is looked for first beside the .c that includes it, so a header exercise would need its
# includers in IMPL too)
IMPL_INC := -I$(IMPL) $(filter-out -I$(IMPL),-Isolutions)
CFLAGS   += -std=c11 -D_GNU_SOURCE $(WARN) $(LAYER_INC) $(IMPL_INC) $(BLAS_CFLAGS) -MMD -MP
LDLIBS   := $(BLAS_LIBS) -lpthread -lm
# SANITIZE=address,undefined (or thread): every object and program built with those sanitizers, a
# finding fatal (make test-sanitize builds so into its own BUILD; never the default build). Warnings
# stay warnings there (-Wno-error): GCC's flow-based ones (-Warray-bounds, -Wformat-truncation) see
# the instrumentation's own code and cry wolf (pipeline_pairs.c's held[2] "subscript 3"), and the
# default build, -Werror, is the one that keeps the code warning-free. A build dir remembers its
# sanitizers (BUILD/sanitize, written by test-sanitize): a later make there (the exercise checker's
# `make BUILD=... IMPL=tree`, which reuses its objects) compiles and links with the same ones.
ifeq ($(origin SANITIZE),undefined)
  SANITIZE := $(shell cat $(BUILD)/sanitize 2>/dev/null)
endif
ifneq ($(SANITIZE),)
  CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all -Wno-error
  LDLIBS += -fsanitize=$(SANITIZE)
endif

# ---- CUDA: auto-detected; GPU=1 demands it, GPU=0 leaves it out --------------------------
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda /usr/lib/cuda))
NVCC      := $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
NCCL_H    := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h))
ifeq ($(GPU),auto)
  ifneq ($(and $(NVCC),$(NCCL_H)),)
    USE_CUDA := 1
    CUDA_WHY := GPU=auto and both nvcc and nccl.h were found
  else
    USE_CUDA := 0
    CUDA_WHY := GPU=auto and $(if $(NVCC),nccl.h,nvcc) was not found
  endif
else ifeq ($(GPU),1)
  ifeq ($(NVCC),)
    $(error GPU=1 but nvcc was not found (set CUDA_HOME or PATH); use GPU=0 for a CPU-only build)
  endif
  ifeq ($(NCCL_H),)
    $(error GPU=1 but nccl.h was not found under $(CUDA_HOME)/include or /usr/include; use GPU=0)
  endif
  USE_CUDA := 1
  CUDA_WHY := GPU=1 asked for it
else ifeq ($(GPU),0)
  USE_CUDA := 0
  CUDA_WHY := GPU=0 asked for a CPU-only build
else
  $(error GPU must be auto, 0 or 1, not '$(GPU)')
endif
CUDA_ARCH ?= -gencode arch=compute_80,code=[sm_80,compute_80] -gencode arch=compute_90,code=sm_90
ifeq ($(USE_CUDA),1)
  COBJ     := $(BUILD)/obj/common-cuda
  CFLAGS   += -DZL_CUDA -I$(CUDA_HOME)/include
  # -fmad=false: no fused multiply-add, so elementwise kernels (AdamW, SGD, add, scale) do the CPU
  # path's IEEE arithmetic step for step and CPU/GPU runs agree to the bit there (notes/gpu.md)
  NVFLAGS  := -O2 -g -std=c++17 $(CUDA_ARCH) -fmad=false -DZL_CUDA $(LAYER_INC) $(shell mpicc --showme:compile) \
              -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter -MMD -MP
  CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
  LDLIBS   += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas -lcublasLt -lnccl -lcudart -lstdc++
endif

# ---- sources (discovered: add a file, it is built) --------------------------------------
COMMON_C  := $(foreach l,$(LAYERS),$(wildcard common/$(l)/*.c))
COMMON_CU := $(if $(filter 1,$(USE_CUDA)),$(foreach l,$(LAYERS),$(wildcard common/$(l)/*.cu)))
# IMPL's own *.c, then (for a tree over solutions/) every solutions/*.c whose name IMPL lacks: so
# exercises/ holds only the files with an exercise and each function is written once
IMPL_C    := $(wildcard $(IMPL)/*.c)
SOL_C     := $(if $(filter-out solutions,$(IMPL)),\
               $(filter-out $(IMPL_C:$(IMPL)/%=solutions/%),$(wildcard solutions/*.c)))
CHAPTERS  := $(sort $(notdir $(wildcard chapters/[0-9][0-9]_*)))
COMMON_O  := $(COMMON_C:common/%.c=$(COBJ)/%.o) $(COMMON_CU:common/%.cu=$(COBJ)/%.cu.o)
IMPL_O    := $(IMPL_C:$(IMPL)/%.c=$(OBJ)/$(IMPL)/%.o) $(SOL_C:solutions/%.c=$(OBJ)/solutions/%.o)
LIB       := $(OBJ)/libzl.a
# Each chapter dir holds main.c (-> chNN_name) and optionally other *.c, each its own program
# (chapters/01_collectives/collbench.c -> ch01_collbench). The names, derived once:
#   $(call chapter_main,01_collectives)   -> $(BIN)/ch01_collectives
#   $(call chapter_extras,01_collectives) -> collbench   (the other programs' stems)
chapter_num    = $(firstword $(subst _, ,$(1)))
chapter_main   = $(BIN)/ch$(call chapter_num,$(1))_$(patsubst $(call chapter_num,$(1))_%,%,$(1))
chapter_extras = $(filter-out main,$(basename $(notdir $(wildcard chapters/$(1)/*.c))))
PROGRAMS  := $(foreach c,$(CHAPTERS),$(call chapter_main,$(c)) $(foreach f,$(call chapter_extras,$(c)),$(BIN)/ch$(call chapter_num,$(c))_$(f)))
TOOL_C    := $(wildcard common/tools/*.c)
TOOLS     := $(TOOL_C:common/tools/%.c=$(BIN)/%)
TEST_C    := $(wildcard tests/unit/*.c) $(wildcard tests/mpi/test_*.c)
TEST_BIN  := $(OUT)/tests/zl_tests
SCN_C     := $(wildcard tests/mpi/scn_*.c)
SCN_BIN   := $(SCN_C:tests/mpi/%.c=$(OUT)/tests/%)
EXPLORER_NATIVE := $(OUT)/tests/explorer_native

.PHONY: all build demo test test-long test-kernels test-prep test-run test-sanitize run doctor deps exercises \
        check-exercises exercise hint exercise-list grade answers bench bench-collectives bench-ddp plots clean test-gpu \
        gpu-build bench-gpu cuda-check help FORCE
.DEFAULT_GOAL := all

all: build
build: $(PROGRAMS) $(TOOLS) $(TEST_BIN) $(SCN_BIN) $(EXPLORER_NATIVE)
	@echo "built $(IMPL) into $(BIN) (CUDA path: $(if $(filter 1,$(USE_CUDA)),on,off))"

# a fresh archive each time (ar alone would keep members of objects that no longer exist, e.g.
# after a file moved), and again when this Makefile or the list of IMPL's sources changes (a file
# that left exercises/ is now built from solutions/)
IMPL_STAMP := $(OBJ)/impl-sources.stamp
$(IMPL_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(IMPL_C) $(SOL_C)' | cmp -s - $@ 2>/dev/null || echo '$(IMPL_C) $(SOL_C)' >$@
$(LIB): $(COMMON_O) $(IMPL_O) $(IMPL_STAMP) Makefile
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(COBJ)/%.o: common/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@
# .cu objects also depend on the nvcc flags themselves (a changed -fmad or arch list rebuilds them)
NVFLAGS_STAMP := $(COBJ)/nvflags.stamp
$(NVFLAGS_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(NVFLAGS)' | cmp -s - $@ 2>/dev/null || echo '$(NVFLAGS)' >$@
FORCE:
$(COBJ)/%.cu.o: common/%.cu $(NVFLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@
$(OBJ)/$(IMPL)/%.o: $(IMPL)/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@
ifneq ($(IMPL),solutions)
$(OBJ)/solutions/%.o: solutions/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@
endif
$(OBJ)/chapters/%.o: chapters/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@
$(OBJ)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CRIT_CFLAGS) -Itests -DZL_BIN='"$(BIN)"' -DZL_TESTBIN='"$(OUT)/tests"' -DZL_IMPL='"$(IMPL)"' -c $< -o $@
$(OBJ)/tools/%.o: common/tools/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# chapter programs: chapters/NN_name/main.c -> chNN_name ; chapters/NN_name/x.c -> chNN_x
define chapter_rules
$(call chapter_main,$(1)): $(OBJ)/chapters/$(1)/main.o $(LIB)
	@mkdir -p $$(@D)
	$$(CC) $$^ -o $$@ $$(LDLIBS)
$(foreach f,$(call chapter_extras,$(1)),
$(BIN)/ch$(call chapter_num,$(1))_$(f): $(OBJ)/chapters/$(1)/$(f).o $(LIB)
	@mkdir -p $$(@D)
	$$(CC) $$^ -o $$@ $$(LDLIBS)
)
endef
$(foreach c,$(CHAPTERS),$(eval $(call chapter_rules,$(c))))

$(BIN)/%: $(OBJ)/tools/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(LDLIBS)

$(TEST_BIN): $(TEST_C:tests/%.c=$(OBJ)/tests/%.o) $(LIB)
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(CRIT_LIBS) $(LDLIBS)
$(OUT)/tests/scn_%: $(OBJ)/tests/mpi/scn_%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(LDLIBS)
# objects reached only through pattern rules are "intermediate": keep them (no rm, no rebuild)
.SECONDARY: $(SCN_C:tests/%.c=$(OBJ)/tests/%.o) $(TOOL_C:common/tools/%.c=$(OBJ)/tools/%.o)

# (and those of a tree outside BUILD, such as make exercise's judged one: a changed header rebuilds its objects too)
-include $(shell find $(BUILD) $(if $(filter $(BUILD)/%,$(OUT)),,$(OUT)) -name '*.d' 2>/dev/null)

# ---- the two commands ---------------------------------------------------------------------
deps:
	@bash common/scripts/deps.sh

# make test: set-up, freshness of exercises/, the exercises tree builds, every .cu compiles,
# then one Criterion run of unit + multi-rank tests (its summary is the last line).
# make test IMPL=exercises: the same tests against the student's tree (exercises/, the files with no
# exercise from solutions/; stubs fail their tests).
# The Criterion run is in this recipe itself, so a failure adds only make's one "Error" line.
# The build runs on every core (JOBS, default nproc): a fresh clone's build is a fifth of the budget.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test:
	@t0=$$(date +%s); bash common/scripts/deps.sh && $(MAKE) --no-print-directory -j$(JOBS) test-prep && \
	  ZL_TEST_T0=$$t0 bash common/scripts/run_tests.sh $(TEST_BIN) $(if $(TEST_FILTER),'$(TEST_FILTER)')

test-prep: build
ifeq ($(IMPL),solutions)
	@$(MAKE) --no-print-directory check-exercises
	@$(MAKE) --no-print-directory IMPL=exercises build >$(BUILD)/exercises-build.log 2>&1 && echo "exercises tree builds: ok" \
	 || $(PYTHON) common/scripts/exercises.py compile-report exercises $(BUILD)/exercises-build.log
endif
ifeq ($(USE_CUDA),1)
	@$(MAKE) --no-print-directory cuda-check
endif

# make test-long: the longer sweeps (suites *_long: more grids, more rows of a table), which
# make test leaves out; each contract they check is also in make test at a smaller size; then
# make test-sanitize over make test's suites (its own TEST_FILTER: none).
test-long: test-prep
	@bash common/scripts/run_tests.sh $(TEST_BIN) '*_long/*'
	@$(MAKE) --no-print-directory test-sanitize TEST_FILTER=

# make test-sanitize: make test's suite (or TEST_FILTER's) with every program, tool and test built
# with AddressSanitizer + UndefinedBehaviorSanitizer into SAN_BUILD (CPU only: GPU=0), any finding
# fatal (a test whose program reports one fails); then the communication engine's threads under
# ThreadSanitizer (TSAN_BUILD, TSAN_FILTER's suites). common/scripts/sanitize.sh: the options, the
# suppressions of the uninstrumented libraries (Open MPI, OpenBLAS), the times.
SAN_BUILD   ?= build-sanitize
TSAN_BUILD  ?= build-tsan
# the suites that drive the communication engine hardest: its threads, fibers and helpers (common_engine,
# common_comm, the synchronous sends), the collectives and all-to-all, DDP's overlap, pipeline pairs, EP
TSAN_FILTER ?= @(common_engine*|common_comm|common_sync_sends|ch01_collectives|ch01_alltoall|ch02_ddp|ch02_ddp_overlap|ch07_pipeline_pairs|ch12_moe)/*
test-sanitize:
	@bash common/scripts/deps.sh
	@mkdir -p $(SAN_BUILD) $(TSAN_BUILD)
	@echo address,undefined >$(SAN_BUILD)/sanitize && echo thread >$(TSAN_BUILD)/sanitize
	@$(MAKE) --no-print-directory -j$(JOBS) BUILD=$(SAN_BUILD) GPU=0 SANITIZE=address,undefined build \
	  >$(SAN_BUILD)/build.log 2>&1 || { tail -30 $(SAN_BUILD)/build.log; \
	  echo "test-sanitize: the ASan+UBSan build failed ($(SAN_BUILD)/build.log)"; exit 1; }
	@$(MAKE) --no-print-directory -j$(JOBS) BUILD=$(TSAN_BUILD) GPU=0 SANITIZE=thread build \
	  >$(TSAN_BUILD)/build.log 2>&1 || { tail -30 $(TSAN_BUILD)/build.log; \
	  echo "test-sanitize: the TSan build failed ($(TSAN_BUILD)/build.log)"; exit 1; }
	@bash common/scripts/sanitize.sh $(SAN_BUILD) $(TSAN_BUILD) '$(or $(TEST_FILTER),!(*_long)/*)' '$(TSAN_FILTER)'

# make test-kernels: the portability matrix — the tests that compare across GEMM shapes (or
# TEST_FILTER's) once per OpenBLAS kernel (KERNELS=all, a list, or others:N), forced with
# OPENBLAS_CORETYPE (common/scripts/kernels.sh; notes/benchmarks.md, "Portability").
KERNELS ?= all
test-kernels: test-prep
	@bash common/scripts/kernels.sh $(TEST_BIN) --kernels $(KERNELS) $(if $(TEST_FILTER),--filter '$(TEST_FILTER)') \
	  $(if $(KERNELS_JSON),--json $(KERNELS_JSON))

test-run: test-prep
	@bash common/scripts/run_tests.sh $(TEST_BIN) $(if $(TEST_FILTER),'$(TEST_FILTER)')

# make demo writes under results/ only (the JSON, the traces, results/figures/): the checkout
# stays clean (git status shows nothing after it).
demo:
	@bash common/scripts/deps.sh
	@$(MAKE) --no-print-directory build
	@ZL_BIN=$(BIN) ZL_RESULTS=$(RESULTS) PLOT_PYTHON=$(PLOT_PYTHON) bash common/scripts/demo.sh $(CH)

# make plots: the figures (results/figures/*.png) from the JSON under results/ that make demo
# writes, as the tour draws them; a figure whose inputs are missing is skipped with a note.
# make figures (maintainers): the same figures into notes/figures/, the PNGs the notes show and
# git tracks; the only target that writes there, so make demo and make plots leave a checkout
# clean. The python that plots: PLOT_PYTHON (defined with the toolchain above, as deps.sh says).
.PHONY: figures
plots figures:
	@test -n "$(PLOT_PYTHON)" || { echo "error: no python3 with matplotlib: run 'make deps' (Debian: apt-get install python3-matplotlib)"; exit 2; }
	@$(PLOT_PYTHON) common/scripts/plots.py --results $(RESULTS) --out $(if $(filter figures,$@),notes/figures,$(RESULTS)/figures)

# the chapter's main program (chapters/NN_name/main.c -> chNN_name); PROG=collbench picks another;
# NODES=K runs the NP ranks on K emulated nodes (root; common/scripts/cluster.sh, notes/09-nodes.md),
# LINK_MBIT=R shapes their links
CH_NAME   = $(patsubst $(CH)_%,%,$(firstword $(filter $(CH)_%,$(CHAPTERS))))
run: build
	@test -n "$(CH)" -a -n "$(CH_NAME)" || { echo "usage: make run CH=NN NP=N ARGS=\"...\" [PROG=name]  (chapters: $(CHAPTERS))"; exit 2; }
	@bash common/scripts/zlrun $(if $(NODES),--nodes $(NODES) $(if $(LINK_MBIT),--link-mbit $(LINK_MBIT))) $(NP) $(BIN)/ch$(CH)_$(or $(PROG),$(CH_NAME)) $(ARGS)

doctor:
	@ZL_USE_CUDA="$(USE_CUDA)" ZL_CUDA_WHY="$(CUDA_WHY)" ZL_NVCC="$(NVCC)" ZL_NCCL_H="$(NCCL_H)" \
	 ZL_CUDA_HOME="$(CUDA_HOME)" ZL_GPU="$(GPU)" ZL_PYTHON="$(PYTHON)" ZL_PLOT_PYTHON="$(PLOT_PYTHON)" \
	 ZL_CC="$(CC)" bash common/scripts/doctor.sh

# every common/LAYER/*.cu compiled into the CUDA-enabled libzl (make test runs it when the path is on)
cuda-check: $(LIB)
ifeq ($(USE_CUDA),1)
	@n=0; for f in $(COMMON_CU); do o=$(COBJ)/$${f#common/}; o=$${o%.cu}.cu.o; \
	   test $$o -nt $$f || { echo "error: $$f was not compiled into $$o"; exit 1; }; n=$$((n+1)); done; \
	 echo "CUDA path: $$n .cu file(s) compiled with $(NVCC) into $(LIB)$(if $(COMMON_CU), ($(notdir $(COMMON_CU))))"
else
	@echo "CUDA path: off ($(CUDA_WHY)); no .cu compiled"
endif

# ---- the GPU path's own tests and benchmarks: need a GPU, never part of make test ----------
#   make test-gpu    CUDA ops vs CPU ops, collectives on CUDA buffers, chapters 02-05 GPU vs CPU
#   make bench-gpu   matmul TFLOP/s vs cuBLAS, step time per chapter (skipped without a GPU)
# See notes/gpu.md; common/scripts/gpu_session.sh runs both on a lent GPU machine.
GPU_TEST_C    := $(wildcard tests/gpu/test_*.c)
GPU_TEST_BIN  := $(OUT)/tests/zl_gpu_tests
GPU_PROGS     := $(patsubst tests/gpu/%.c,$(OUT)/tests/%,$(wildcard tests/gpu/gpu_*.c)) \
                 $(patsubst tests/gpu/%.cu,$(OUT)/tests/%,$(wildcard tests/gpu/gpu_*.cu))
.PRECIOUS: $(OBJ)/tests/gpu/%.o $(OBJ)/tests/gpu/%.cu.o
ifeq ($(USE_CUDA),1)
$(GPU_TEST_BIN): $(GPU_TEST_C:tests/%.c=$(OBJ)/tests/%.o) $(LIB)
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(CRIT_LIBS) $(LDLIBS)
$(OBJ)/tests/gpu/%.cu.o: tests/gpu/%.cu $(NVFLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@
$(OUT)/tests/gpu_%: $(OBJ)/tests/gpu/gpu_%.cu.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(LDLIBS)
$(OUT)/tests/gpu_%: $(OBJ)/tests/gpu/gpu_%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(LDLIBS)
gpu-build: build $(GPU_TEST_BIN) $(GPU_PROGS)
test-gpu: gpu-build
	@OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(GPU_TEST_BIN) --jobs 1 --short-filename $(if $(TEST_FILTER),--filter '$(TEST_FILTER)')
bench-gpu: gpu-build
	@bash common/scripts/bench_gpu.sh $(OUT) $(RESULTS)
else
gpu-build test-gpu:
	@echo "error: $@ needs the CUDA path ($(CUDA_WHY)); build with GPU=1 on a machine with nvcc and NCCL" >&2; exit 2
bench-gpu:
	@echo "bench-gpu: skipped (CUDA path off: $(CUDA_WHY))"
endif

# ---- exercises: generated from solutions/, never edited by hand --------------------------
# exercises/ holds the files of solutions/ with at least one exercise (BEGIN/END EXERCISE markers),
# and no other: make exercises writes those and removes the rest; check-exercises fails on a file
# stale, missing, or with no exercise in it. Students write the bodies in exercises/: `make exercises`
# keeps them, and first saves every file it changes or removes that holds a student's work under
# exercises-backup/ (outside build/: make clean keeps it).
exercises:
	@$(PYTHON) common/scripts/exercises.py generate solutions exercises --backup exercises-backup $(if $(RESET),--reset)
check-exercises:
	@$(PYTHON) common/scripts/exercises.py check solutions exercises
# the outputs pasted in notes/*.md (code blocks starting with `$ cmd`) against fresh runs of $(BIN)
# (notes/tour.md, "Checked outputs"); make test runs the same check (suite common_docs)
.PHONY: check-notes
check-notes: build
	@$(PYTHON) common/scripts/check_notes.py --bin $(BIN)
# "no behaviour change": build BASE (a commit) in a temporary worktree, then run the same small
# matrix of training runs (ch02-08, MLP and GPT, fp32 and bf16, grids) with its binaries and with
# build/bin, comparing --save-params bytes and --json losses (common/scripts/same_bits.sh).
.PHONY: check-bits
check-bits: build
	@test -n "$(BASE)" || { echo "usage: make check-bits BASE=REV [FILTER=ch07]"; exit 2; }
	@d=$$(mktemp -d /tmp/zl_base.XXXXXX) && git worktree add -q --detach $$d/src $(BASE) && \
	  $(MAKE) --no-print-directory -C $$d/src GPU=0 ZL_SKIP_DEPS=1 build >$$d/build.log 2>&1 || { echo "check-bits: $(BASE) does not build ($$d/build.log)"; exit 1; }; \
	  bash common/scripts/same_bits.sh $$d/src/build/bin $(BIN) $(FILTER); rc=$$?; git worktree remove --force $$d/src; rm -rf $$d; exit $$rc
# the chapter's tests on your bodies (the reference code for the exercises not yet written), with
# short deadlines, then one line per exercise: done / not done / wrong / timed out / not overlapped.
# EX=name judges that exercise alone; REPEAT=N reruns the judged tests N times with random delays in the
# comm layer once they pass (ZL_JITTER_US: a race shows as "flaky k/N"). The judged tree (BUILD/exercise-check/impl) is built as
# IMPL=<that tree>: it holds exercises/'s files, the rest come from solutions/.
exercise:
	@test -n "$(CH)" || { echo "usage: make exercise CH=NN [EX=name]   (chapters: $(CHAPTERS))"; exit 2; }
	@$(PYTHON) common/scripts/exercises.py status solutions exercises --chapter $(CH) $(if $(EX),--ex $(EX)) \
	  $(if $(REPEAT),--repeat $(REPEAT)) --build $(BUILD) --make "$(MAKE) --no-print-directory BUILD=$(BUILD) GPU=$(GPU)"
# LEVEL=2: the next hint (the first names the idea, the second the indices)
hint:
	@test -n "$(EX)" || { echo "usage: make hint EX=name [LEVEL=2]   (make exercise-list shows the names)"; exit 2; }
	@$(PYTHON) common/scripts/exercises.py hint solutions $(EX) --level $(or $(LEVEL),1)
exercise-list:
	@$(PYTHON) common/scripts/exercises.py list solutions --dst exercises --status $(BUILD)/exercise-status.json \
	  $(if $(CH),--chapter $(CH))
# make answers CH=NN: the numeric questions of chapter NN's notes, answered in exercises/answers/NN.txt (make
# exercises writes the file), checked against ch00_memory and ch07's simulator: each wrong one named
# with the calculator's value and command (common/scripts/answers.py)
answers: build
	@test -n "$(CH)" || { echo "usage: make answers CH=NN   (make exercises writes exercises/answers/NN.txt)"; exit 2; }
	@$(PYTHON) common/scripts/answers.py check --chapter $(CH) --bin $(BIN) --dst exercises
# make grade [CH=NN]: make exercise for every chapter with exercises (or CH), then done/total per chapter,
# each verdict with its time against the budget, and GRADE_OUT/grade.json + grade.xml (JUnit) for a course
# (common/scripts/grade.py; GRADE_OUT defaults to BUILD/grade)
grade:
	@$(PYTHON) common/scripts/grade.py run --make "$(MAKE) --no-print-directory BUILD=$(BUILD) GPU=$(GPU)" \
	  --build $(BUILD) --out $(or $(GRADE_OUT),$(BUILD)/grade) $(if $(CH),--chapter $(CH))

# ---- benchmarks: every bench-* target of this Makefile, one after another, into $(RESULTS)/ --
RESULTS ?= results
BENCH_TARGETS = $(shell sed -n 's/^\(bench-[A-Za-z0-9_-]*\):.*/\1/p' $(MAKEFILE_LIST))
bench: build
	@mkdir -p $(RESULTS)
	@test -n "$(strip $(BENCH_TARGETS))" || { echo "bench: no bench-* targets defined yet"; exit 0; }; \
	 failed=; for t in $(BENCH_TARGETS); do echo "== make $$t"; \
	   $(MAKE) --no-print-directory RESULTS=$(RESULTS) $$t || failed="$$failed $$t"; done; \
	 echo "bench: results under $(RESULTS)/"; \
	 test -z "$$failed" || { echo "bench: failed:$$failed"; exit 1; }

# ch01: the collectives, vendor (MPI) vs ring (solutions/ring.c) alternating, 2 and 4 ranks,
# 4 KiB..64 MiB float (notes/benchmarks.md, collectives section). COLLBENCH_ARGS overrides the sweep.
COLLBENCH_ARGS ?= -b 4K -e 64M -f 2 -n 20 -w 5 -d float --op all --impl both
bench-collectives: $(BIN)/ch01_collbench
	@mkdir -p $(RESULTS)
	@for np in 2 4; do echo "== ch01_collbench, $$np ranks -> $(RESULTS)/collbench_np$$np.json"; \
	   bash common/scripts/zlrun $$np $(BIN)/ch01_collbench $(COLLBENCH_ARGS) --json $(RESULTS)/collbench_np$$np.json \
	   || exit 1; done

# ch02: DDP naive vs overlap vs bucketed at N = 2 (alternating, median of repetitions), the share of
# all-reduce time hidden under the backward (from the traces), samples/s at N = 1, 2, 4
# (notes/benchmarks.md, DDP section). ZL_BENCH_REPS / ZL_BENCH_STEPS override the defaults (5 / 20).
bench-ddp: $(BIN)/ch02_ddp
	@bash chapters/02_ddp/bench.sh $(BIN) $(RESULTS)/ddp
	@cp $(RESULTS)/ddp/ch02_naive.trace.json $(RESULTS)/ddp/ch02_bucketed.trace.json $(RESULTS)/

# ---- chapters 03-05: ZeRO step times over DDP, peak bytes per stage, the memory budget demo ----
#   make bench-zero     step time of ZeRO-1/2/3 over DDP at N = 2 and 4 (alternating, medians),
#                       peak bytes per rank at N = 4 vs the formula, then the budget demo
#   make budget-demo    the largest model each stage trains under BUDGET MiB per rank (N = 4)
BUDGET ?= 64
.PHONY: bench-zero budget-demo
bench-zero: build
	@mkdir -p $(RESULTS)
	@bash common/scripts/bench_zero.sh $(BIN) $(RESULTS)
budget-demo: build
	@mkdir -p $(RESULTS)
	@bash common/scripts/budget_demo.sh $(BIN) $(RESULTS) $(BUDGET)

# chapter 13: bytes per step of PowerSGD, 1-bit Adam and qwZ, measured vs formula, and the GPT's loss
# against the uncompressed run over 3 seeds (notes/13-compression.md); JSON under $(RESULTS)/
# (UPDATE_NOTES=1: notes/data/bench_compress.json, the committed measurement notes/13 quotes)
COMPRESS_OUT ?= $(if $(UPDATE_NOTES),notes/data,$(RESULTS))/bench_compress.json
.PHONY: bench-compress
bench-compress: build
	@mkdir -p $(dir $(COMPRESS_OUT))
	@$(PYTHON) common/scripts/bench_compress.py --bin $(BIN) --out $(COMPRESS_OUT) $(if $(LINKS),--links $(LINKS))

# ZeRO-R memory defragmentation on a GPT step: the ledger's real alloc/free sequence replayed through
# a caching allocator and ZeRO's contiguous regions (notes/zero-r.md)
.PHONY: bench-zeror
bench-zeror: build
	@mkdir -p $(RESULTS)
	@bash common/scripts/bench_zeror.sh $(BIN) $(RESULTS)

# the GPT on the CPU: tokens/s of ch02_ddp --model gpt against PyTorch eager on the same model,
# N = 1 and 2, alternating, medians (notes/benchmarks.md, GPT section); skips PyTorch without torch.
# Muon against AdamW on GPT tiny, 300 steps, 5-6 lrs each at 2 seeds (about 4 min on 2 cores); Newton-Schulz's
# FLOPs and time per step; the owners' imbalance (common/scripts/bench_muon.py, notes/03-zero1.md)
.PHONY: bench-muon
bench-muon: build
	@mkdir -p $(RESULTS)
	@$(PYTHON) common/scripts/bench_muon.py --bin $(BIN) --out $(RESULTS)/bench_muon.json

.PHONY: bench-gpt
bench-gpt: build
	@mkdir -p $(RESULTS)
	@$(PYTHON) common/scripts/bench_gpt.py --bin $(BIN) --out $(RESULTS)/bench_gpt.json

# ---- the explorer page (common/explorer/README.md): memory, schedules and collectives in a browser,
# every number from the project's C compiled to WebAssembly (Debian's emscripten). Writes one file,
# EXPLORER_OUT/index.html: open it from disk (file://), no server. Optional: one line and exit 1 where
# emcc is missing; make test never needs it (make test-long tests it in Chromium).
# The C is always solutions/'s (the exercises' stubs would stop the page). NODE_PATH: Debian's emcc
# runs its JS optimizer on node, which finds acorn there when node is not Debian's own.
EMCC ?= $(shell command -v emcc 2>/dev/null)
EXPLORER_OUT ?= $(RESULTS)/explorer
# the schedules' pure C: the simulator (pipeline_sim.c) checks its lists with the checker, which
# needs the rest
PIPELINE_PURE_C := $(addprefix solutions/,pipeline_sched.c pipeline_sim.c pipeline_check.c \
                   pipeline_check_stage.c pipeline_groups.c)
EXPLORER_C := common/explorer/explorer.c common/train/memcalc.c common/train/memcalc_muon.c common/train/memcalc_shape.c \
              common/train/owners_assign.c common/base/args.c common/base/formula.c \
              common/model/gpt.c common/model/model.c $(PIPELINE_PURE_C) solutions/ring.c solutions/alltoall.c \
              $(addprefix solutions/,ddp.c shard.c powersgd.c onebit.c qwz.c qgz.c)
EXPLORER_FLAGS := -O2 -std=c11 -D_GNU_SOURCE $(WARN) -Icommon/explorer/mpi $(LAYER_INC) -Isolutions \
                  -sSINGLE_FILE=1 -sALLOW_MEMORY_GROWTH=1 -sENVIRONMENT=web,node \
                  -sEXPORTED_RUNTIME_METHODS=ccall,UTF8ToString
# The same files natively, in make build (EXPLORER_NATIVE, with tests/explorer/explorer_native.c's main):
# the page's include path and warnings, the host compiler, unreached functions dropped as wasm-ld drops
# them (--gc-sections); explorer.c's EXPORT is plain without __EMSCRIPTEN__. So a change to comm.h or
# ring.c that would break the page breaks the build; suite common_explorer runs it.
EXPLORER_CC ?= cc
EXPLORER_NATIVE_FLAGS := -O2 -std=c11 -D_GNU_SOURCE $(WARN) -Icommon/explorer/mpi $(LAYER_INC) -Isolutions \
                         -ffunction-sections -fdata-sections -MMD -MP
EXPLORER_NATIVE_O := $(patsubst %.c,$(OBJ)/explorer-native/%.o,$(EXPLORER_C) tests/explorer/explorer_native.c)
$(OBJ)/explorer-native/%.o: %.c
	@mkdir -p $(@D)
	$(EXPLORER_CC) $(EXPLORER_NATIVE_FLAGS) -c $< -o $@
$(EXPLORER_NATIVE): $(EXPLORER_NATIVE_O)
	@mkdir -p $(@D)
	$(EXPLORER_CC) $^ -Wl,--gc-sections -o $@ -lm
# Without emcc (or, for the check, Chromium) each says what is missing in one line and exits 1,
# before building anything: common/scripts/deps.sh --explorer installs both (Debian: about 270 MB
# downloaded, 1.3 GB on disk). The page is one file (inline.py: the WebAssembly as base64, measured.js
# and explorer.js inlined): it works copied alone. Its parts are built in OBJ/explorer/.
EXPLORER_CHROMIUM ?= $(shell command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null)
EXPLORER_NO_EMCC := make explorer: emcc (emscripten) is missing, nothing built; install it with \
  common/scripts/deps.sh --explorer (Debian: apt-get install emscripten)
EXPLORER_NO_CHROMIUM := make explorer-check: chromium is missing, nothing checked; install it with \
  common/scripts/deps.sh --explorer (Debian: apt-get install chromium)
.PHONY: explorer
explorer:
ifeq ($(EMCC),)
	@echo "$(EXPLORER_NO_EMCC)" >&2; exit 1
else
	@mkdir -p $(EXPLORER_OUT) $(OBJ)/explorer
	NODE_PATH=/usr/share/nodejs$${NODE_PATH:+:$$NODE_PATH} $(EMCC) $(EXPLORER_FLAGS) $(EXPLORER_C) \
	  -o $(OBJ)/explorer/zl_explorer.js
	@$(PYTHON) common/explorer/measured.py notes/data $(OBJ)/explorer/measured.js
	@rm -f $(addprefix $(EXPLORER_OUT)/,zl_explorer.js explorer.js measured.js)
	@$(PYTHON) common/explorer/inline.py common/explorer/index.html --from $(OBJ)/explorer common/explorer \
	  -o $(EXPLORER_OUT)/index.html
	@echo "explorer: open $(EXPLORER_OUT)/index.html in a browser (one file, from disk, no server:\
	 file://$(abspath $(EXPLORER_OUT))/index.html)"
endif
# make explorer-check: the page in headless Chromium against the native programs (what make test-long
# runs, suite explorer_long), the layout at 1280x720 included; SHOTS=notes/figures also saves a
# screenshot of each panel there. The missing tools first, in one line, before any build.
.PHONY: explorer-check
explorer-check:
ifeq ($(EMCC),)
	@echo "$(subst nothing built,nothing checked,$(subst make explorer:,make explorer-check:,$(EXPLORER_NO_EMCC)))" >&2; exit 1
else ifeq ($(EXPLORER_CHROMIUM),)
	@echo "$(EXPLORER_NO_CHROMIUM)" >&2; exit 1
else
	@$(MAKE) --no-print-directory explorer $(BIN)/ch00_memory $(BIN)/ch01_collectives $(BIN)/ch13_compress \
	  $(BIN)/ch05_zero3
	@$(PYTHON) common/explorer/browser_test.py --page $(EXPLORER_OUT)/index.html --bin $(BIN) \
	  --chromium $(EXPLORER_CHROMIUM) $(if $(SHOTS),--shots $(SHOTS))
endif

help:
	@sed -n '2,/^$$/{/^$$/d;s/^# \{0,1\}//;p}' Makefile
	@echo "  more: make exercises | check-exercises | exercise-list | hint EX=name | bench | cuda-check | deps | clean"

clean:
	rm -rf $(BUILD)

# ch10: the long-sequence demo: the largest sequence length that trains one step under BUDGET_LONG MiB
# per rank for 1 rank, TP 4 (and TP 4 + SP when ch06_tp has --sp), CP 4, CP 4 + ZeRO-3, CP 2 x ZeRO-3,
# Ulysses, the hybrid, then CP 4's causal imbalance with and without --cp-balance, the traffic of SP,
# ring, Ulysses and the hybrid at C = 2, 4, and (root) the same on 2 emulated nodes at LINKS_LONG
# Mbit/s (0 = unshaped; LINKS_LONG= skips them) (notes/10-long-sequences.md). Writes LONG_OUT (default
# $(RESULTS)/bench_long.json; UPDATE_NOTES=1: notes/data/bench_long.json, the committed measurement the
# pages quote and make plots draws); LONG_PARTS=comm,nodes runs only those parts and keeps the others.
# About 2 min on 2 cores without the emulated nodes (LINKS_LONG=, ZL_BENCH_REPS=1: 125 s measured under
# load 2-7); the emulated nodes (root) add about 10 min (estimated from the committed run's step times).
BUDGET_LONG ?= 24
LONG_OUT ?= $(if $(UPDATE_NOTES),notes/data,$(RESULTS))/bench_long.json
LINKS_LONG ?= 0,1000,100,20
LONG_PARTS ?= seq,balance,comm,nodes
.PHONY: bench-long
bench-long: build
	@mkdir -p $(dir $(LONG_OUT))
	@$(PYTHON) common/scripts/bench_long.py --bin $(BIN) --out $(LONG_OUT) --budget $(BUDGET_LONG) --links "$(LINKS_LONG)" \
	  --parts $(LONG_PARTS) --reps $${ZL_BENCH_REPS:-2}

# ch07: GPipe, 1F1B and interleaved bubble vs formula at P = 2, M = 1, 4, 8 and P = 4, M = 8, on the
# MLP and GPT small, each step vs the ideal (M+P-1)/(MP) x the 1-rank step (notes/07-pipeline.md);
# BENCH_BASE=REV adds REV's build (temporary worktree, as check-bits) on the MLP P = 2 cases,
# alternating. ZL_BENCH_REPS (default 3), ZL_BENCH_STEPS (default 4), ZL_BENCH_MODELS (mlp,gpt).
# The zero-bubble rows (zb-h1, zb-h2 beside 1f1b at P = 2, M = 4, 8, with the simulator fed the run's
# F, B, W; P = 4, 8 predicted by it): in the matrix; ZL_BENCH_CASES=zb runs only those.
# ZL_BENCH_CASES=fb: DualPipeV's overlapped F&B (07d) on 2 emulated nodes (root), 1f1b, zb-h1, dualpipev
# with and without --fb-overlap at ZL_BENCH_FB_LINKS Mbit/s (default 0,100), into bench_pipeline_fb.json.
# ZL_BENCH_NOTE="..." goes into the JSON's _meta (what else ran on the box).
.PHONY: bench-pipeline
bench-pipeline: build
	@mkdir -p $(RESULTS)
	@if [ -n "$(BENCH_BASE)" ]; then d=$$(mktemp -d /tmp/zl_bench_base.XXXXXX) && \
	  git worktree add -q --detach $$d/src $(BENCH_BASE) && \
	  $(MAKE) --no-print-directory -C $$d/src GPU=0 ZL_SKIP_DEPS=1 build >$$d/build.log 2>&1 || { echo "bench-pipeline: $(BENCH_BASE) does not build ($$d/build.log)"; exit 1; }; \
	  $(PYTHON) common/scripts/bench_pipeline.py --bin $(BIN) --base-bin $$d/src/build/bin --base-name $(BENCH_BASE) \
	    --reps $${ZL_BENCH_REPS:-3} --steps $${ZL_BENCH_STEPS:-4} --models $${ZL_BENCH_MODELS:-mlp,gpt} \
	    --cases $${ZL_BENCH_CASES:-all} --note "$${ZL_BENCH_NOTE:-}" --out $(RESULTS)/bench_pipeline.json; rc=$$?; \
	  git worktree remove --force $$d/src; rm -rf $$d; exit $$rc; \
	else $(PYTHON) common/scripts/bench_pipeline.py --bin $(BIN) --reps $${ZL_BENCH_REPS:-3} --steps $${ZL_BENCH_STEPS:-4} \
	  --models $${ZL_BENCH_MODELS:-mlp,gpt} --cases $${ZL_BENCH_CASES:-all} --note "$${ZL_BENCH_NOTE:-}" \
	  --fb-links $${ZL_BENCH_FB_LINKS:-0,100} \
	  --out $(RESULTS)/bench_pipeline$$([ "$${ZL_BENCH_CASES:-}" = fb ] && echo _fb).json; fi

# ch09: on 2 emulated nodes x 2 ranks (root; skipped with the reason elsewhere), at link rates
# LINKS (Mbit/s): the flat vs two-level all-reduce (bytes across nodes beside the formula), and
# the step time of DDP, ZeRO-3, HSDP, TP = 2 inside a node and TP = 2 across (notes/09-nodes.md).
LINKS ?= 100,400
.PHONY: bench-nodes
bench-nodes: build
	@mkdir -p $(RESULTS)
	@$(PYTHON) common/scripts/bench_nodes.py --bin $(BIN) --links $(LINKS) --reps $${ZL_BENCH_REPS:-3} --out $(RESULTS)/bench_nodes.json

# ch02 / ch05: DDP bucketed vs naive and ZeRO-3 prefetch 1 vs 0 at N = 2 and 4: the step time
# overlap saves beside the collectives' own time in the run without it (the most it could save),
# alternating, medians (notes/02-ddp.md, notes/05-zero3.md). ZL_BENCH_REPS (3), ZL_BENCH_STEPS (4).
.PHONY: bench-overlap
bench-overlap: build
	@mkdir -p $(RESULTS)
	@$(PYTHON) common/scripts/bench_overlap.py --bin $(BIN) --reps $${ZL_BENCH_REPS:-3} --steps $${ZL_BENCH_STEPS:-4} \
	  --out $(RESULTS)/bench_overlap.json

# ch12: Mixture of Experts on the small GPT (notes/12-experts.md): the drop rate against the capacity
# factor (1.0, 1.25, 2.0; top-1 and top-2, with and without the aux loss), max/mean expert load over the
# first steps with no balancing, the aux loss and the aux-free bias, the all-to-all bytes at EP 2 beside
# their formula and beside ch06_tp's TP 2 of the dense MLP, step time and peak per rank at EP 1, 2, 4
# against dense DDP with the same active parameters (ZL_BENCH_REPS runs each, alternating, medians; N = 4
# oversubscribes a 2-core box), and the time per step in the dispatch / experts / combine spans of a
# --trace. Writes EXPERTS_OUT (default $(RESULTS)/bench_experts.json; UPDATE_NOTES=1:
# notes/data/bench_experts.json, the committed measurement the pages quote and make plots draws);
# EXPERTS_PARTS=bytes,trace runs only those and keeps the others. 2-6 min on 2 cores (the committed run
# 79 s; 372 s measured under load 4-6; ZL_BENCH_REPS=1 ZL_BENCH_STEPS=2: 227 s under load 5).
EXPERTS_OUT ?= $(if $(UPDATE_NOTES),notes/data,$(RESULTS))/bench_experts.json
EXPERTS_PARTS ?= drop,balance,bytes,step,trace
.PHONY: bench-experts
bench-experts: build
	@mkdir -p $(dir $(EXPERTS_OUT))
	@$(PYTHON) common/scripts/bench_experts.py --bin $(BIN) --out $(EXPERTS_OUT) --parts $(EXPERTS_PARTS) \
	  --reps $${ZL_BENCH_REPS:-3} --steps $${ZL_BENCH_STEPS:-8} --zero $(or $(EXPERTS_ZERO),0)
