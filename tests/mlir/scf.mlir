// scf forms: while without loop values, execute_region, parallel.

func.func @while_no_values(%arg0: memref<1xi64>) {
  %c0 = arith.constant 0 : index
  %c10_i64 = arith.constant 10 : i64
  %c1_i64 = arith.constant 1 : i64
  scf.while : () -> () {
    %0 = memref.load %arg0[%c0] : memref<1xi64>
    %1 = arith.cmpi slt, %0, %c10_i64 : i64
    scf.condition(%1)
  } do {
    %0 = memref.load %arg0[%c0] : memref<1xi64>
    %1 = arith.addi %0, %c1_i64 : i64
    memref.store %1, %arg0[%c0] : memref<1xi64>
    scf.yield
  }
  return
}

// -----

func.func @region(%arg0: i1, %arg1: i64) -> i64 {
  %0 = scf.execute_region -> i64 {
    cf.cond_br %arg0, ^bb1, ^bb2(%arg1 : i64)
  ^bb1:  // pred: ^bb0
    %c3_i64 = arith.constant 3 : i64
    cf.br ^bb2(%c3_i64 : i64)
  ^bb2(%1: i64):  // 2 preds: ^bb0, ^bb1
    scf.yield %1 : i64
  }
  return %0 : i64
}

// -----

func.func @fill(%arg0: memref<4x3xi64>, %arg1: index, %arg2: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%arg3, %arg4) = (%c0, %c0) to (%arg1, %arg2) step (%c1, %c1) {
    %0 = arith.muli %arg3, %arg2 : index
    %1 = arith.addi %0, %arg4 : index
    %2 = arith.index_cast %1 : index to i64
    memref.store %2, %arg0[%arg3, %arg4] : memref<4x3xi64>
    scf.reduce
  }
  return
}

// -----

func.func @loop(%arg0: index) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c0_i64 = arith.constant 0 : i64
  %0 = scf.for %arg1 = %c0 to %arg0 step %c1 iter_args(%arg2 = %c0_i64) -> (i64) {
    %1 = arith.index_cast %arg1 : index to i64
    %2 = arith.addi %arg2, %1 : i64
    scf.yield %2 : i64
  }
  return %0 : i64
}

// -----

func.func @sum_and_max(%arg0: memref<?xi64>, %arg1: index) -> (i64, i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c0_i64 = arith.constant 0 : i64
  %c-9223372036854775808_i64 = arith.constant -9223372036854775808 : i64
  %0:2 = scf.parallel (%arg2) = (%c0) to (%arg1) step (%c1) init (%c0_i64, %c-9223372036854775808_i64) -> (i64, i64) {
    %1 = memref.load %arg0[%arg2] : memref<?xi64>
    scf.reduce(%1, %1 : i64, i64) {
    ^bb0(%arg3: i64, %arg4: i64):
      %2 = arith.addi %arg3, %arg4 : i64
      scf.reduce.return %2 : i64
    }, {
    ^bb0(%arg3: i64, %arg4: i64):
      %2 = arith.maxsi %arg3, %arg4 : i64
      scf.reduce.return %2 : i64
    }
  }
  return %0#0, %0#1 : i64, i64
}

// -----

func.func @empty_else(%arg0: i1, %arg1: memref<i64>, %arg2: i64) {
  scf.if %arg0 {
    memref.store %arg2, %arg1[] : memref<i64>
  } else {
  }
  %c1_i64 = arith.constant 1 : i64
  %0 = arith.addi %arg2, %c1_i64 : i64
  scf.if %arg0 {
  } else {
    memref.store %0, %arg1[] : memref<i64>
  }
  scf.if %arg0 {
    memref.store %arg2, %arg1[] : memref<i64>
  }
  return
}
