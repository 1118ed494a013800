// Block arguments, branch operands, cf.switch and branch weights, as mlir-opt prints them.
// Each chunk is one module; tests/test_mlir_interop.py reads, runs and prints them back.

func.func @count_down(%arg0: i64) -> i64 {
  %c0_i64 = arith.constant 0 : i64
  %c1_i64 = arith.constant 1 : i64
  cf.br ^bb1(%arg0, %c0_i64 : i64, i64)
^bb1(%0: i64, %1: i64):  // 2 preds: ^bb0, ^bb2
  %2 = arith.cmpi sgt, %0, %c0_i64 : i64
  cf.cond_br %2 weights([90, 10]), ^bb2, ^bb3
^bb2:  // pred: ^bb1
  %3 = arith.subi %0, %c1_i64 overflow<nsw> : i64
  %4 = arith.addi %1, %0 overflow<nsw, nuw> : i64
  cf.br ^bb1(%3, %4 : i64, i64)
^bb3:  // pred: ^bb1
  return %1 : i64
}

// -----

func.func @pick(%arg0: i32, %arg1: i64, %arg2: i64) -> i64 {
  %c7_i64 = arith.constant 7 : i64
  cf.switch %arg0 : i32, [
    default: ^bb1(%c7_i64 : i64),
    0: ^bb2(%arg1 : i64),
    5: ^bb3
  ]
^bb1(%0: i64):  // 3 preds: ^bb0, ^bb2, ^bb3
  return %0 : i64
^bb2(%1: i64):  // pred: ^bb0
  %2 = arith.addi %1, %1 : i64
  cf.br ^bb1(%2 : i64)
^bb3:  // pred: ^bb0
  %3 = arith.muli %arg2, %arg2 : i64
  cf.br ^bb1(%3 : i64)
}

// -----

func.func @swap_loop(%arg0: i64, %arg1: i64, %arg2: i64) -> i64 {
  %c0_i64 = arith.constant 0 : i64
  %c1_i64 = arith.constant 1 : i64
  cf.br ^bb1(%arg0, %arg1, %arg2 : i64, i64, i64)
^bb1(%0: i64, %1: i64, %2: i64):  // 2 preds: ^bb0, ^bb2
  %3 = arith.cmpi eq, %2, %c0_i64 : i64
  cf.cond_br %3, ^bb3, ^bb2
^bb2:  // pred: ^bb1
  %4 = arith.subi %2, %c1_i64 : i64
  cf.br ^bb1(%1, %0, %4 : i64, i64, i64)
^bb3:  // pred: ^bb1
  %5 = arith.muli %0, %c1_i64 : i64
  return %5 : i64
}

// -----

func.func private @helper(i64) -> i64

func.func @calls(%arg0: i64) -> i64 {
  %0 = call @double(%arg0) : (i64) -> i64
  return %0 : i64
}

func.func @double(%arg0: i64) -> i64 {
  %0 = arith.addi %arg0, %arg0 : i64
  return %0 : i64
}
